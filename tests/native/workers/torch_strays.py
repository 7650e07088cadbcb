"""hvd_selector.torch through init/shutdown cycles while strangers connect to the job's ports.

Run under the launcher: python torch_strays.py OUT_DIR CYCLES (the test
throws the stray connections from outside, devtools/stray_connections.py).
Each cycle re-initialises (a new rendezvous generation, new data listeners)
and runs the engine through what Horovod's suite does: named async
collectives submitted in different orders per rank, a barrier, a process set
added and removed (its members meet and listen again), a duplicate name, a
mismatch that fails on every rank, and a DistributedOptimizer step. Every
result is checked exactly; OUT_DIR/outcome<rank>.txt is "ok <cycles>" or
the first failure.
"""

import os
import sys
import traceback
from pathlib import Path

import torch

import hvd_selector.torch as hvd

out_dir, cycles = Path(sys.argv[1]), int(sys.argv[2])


def cycle(n: int) -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    total = float(sum(range(size)))
    names = [f"c{n}.t{i}" for i in range(8)]
    order = names if rank % 2 == 0 else names[::-1]  # matched by name, whatever the order
    handles = {name: hvd.allreduce_async(torch.full((64,), float(rank)), name=name, op=hvd.Sum) for name in order}
    gathered = hvd.allgather_async(torch.full((rank + 1, 2), rank), name=f"c{n}.gather")
    for name in names:
        assert torch.equal(hvd.synchronize(handles[name]), torch.full((64,), total)), name
    want = torch.cat([torch.full((r + 1, 2), r) for r in range(size)])
    assert torch.equal(hvd.synchronize(gathered), want)
    hvd.barrier()
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    if evens.included():
        got = hvd.allreduce(torch.ones(3), op=hvd.Sum, process_set=evens)
        assert torch.equal(got, torch.full((3,), float(evens.size())))
    hvd.remove_process_set(evens)
    first = hvd.broadcast_async(torch.full((5,), rank), root_rank=0, name=f"c{n}.dup")
    try:
        hvd.broadcast_async(torch.full((5,), rank), root_rank=0, name=f"c{n}.dup")
        raise AssertionError("no duplicate name error")
    except ValueError:
        pass
    assert torch.equal(hvd.synchronize(first), torch.zeros(5, dtype=torch.int64))
    try:
        hvd.allreduce(torch.ones(2 + rank), name=f"c{n}.mismatch")
        raise AssertionError("no mismatch error")
    except hvd.MismatchError:
        pass
    torch.manual_seed(n)
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
    model(torch.full((3, 4), float(rank))).sum().backward()
    opt.step()
    weights = hvd.allgather(model.weight.detach().reshape(1, -1), name=f"c{n}.weights")
    assert all(torch.equal(weights[0], w) for w in weights), "ranks' parameters differ after a step"
    hvd.barrier()
    hvd.shutdown()


try:
    for n in range(cycles):
        cycle(n)
    outcome = f"ok {cycles}"
except Exception:
    outcome = traceback.format_exc()[-2000:]
(out_dir / f"outcome{os.environ['HVD_SELECTOR_RANK']}.txt").write_text(outcome)
