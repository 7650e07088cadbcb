"""An elastic training loop: python elastic_train.py OUT_DIR STEPS PAUSE {numpy|torch}.

Each step allreduces a value whose exact sum depends on the step and the job's
size (a rank holding a stale tensor, or a mesh mixing two generations, gives
another number: the worker then exits 5), and moves a weight by a rule that does
not depend on the size, so the loss at step k is the same in every generation.
Every step appends one JSON line to OUT_DIR/log-<worker>.jsonl; the state is
committed every COMMIT_EVERY steps. "numpy": hvd_selector.elastic.ObjectState
holds the weight; "torch": hvd_selector.torch.elastic.TorchState holds a model
(the weight) and its SGD optimizer. SIGUSR1 prints every thread's stack.
"""

import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

COMMIT_EVERY = 5
faulthandler.register(signal.SIGUSR1)
out_dir, steps, pause, api = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
log = open(out_dir / f"log-{os.environ['HVD_SELECTOR_WORKER']}.jsonl", "a", buffering=1)  # noqa: SIM115
log.write(json.dumps({"pid": os.getpid()}) + "\n")

if api == "torch":
    import torch

    import hvd_selector.torch as hvd

    elastic = hvd.elastic
    hvd.init()
    model = torch.nn.Linear(1, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = elastic.TorchState(model, optimizer, step=0, commits=0)

    def allreduce(values: list[float], op: int, name: str) -> list[float]:
        return hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=op, name=name).tolist()

    def weight() -> float:
        return float(model.weight.item())

    def move(grad: float) -> None:
        model.weight.grad = torch.full_like(model.weight, -grad)
        optimizer.step()  # weight += 0.1 * grad
else:
    import hvd_selector as hvd
    from hvd_selector import elastic

    hvd.init()
    state = elastic.ObjectState(step=0, weight=0.0, commits=0)

    def allreduce(values: list[float], op: int, name: str) -> list[float]:
        return hvd.allreduce(np.array(values, dtype=np.float64), op=op, name=name).tolist()

    def weight() -> float:
        return float(state.weight)

    def move(grad: float) -> None:
        state.weight += 0.1 * grad


resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


@elastic.run
def train(state) -> None:
    while state.step < steps:
        size, rank = hvd.size(), hvd.rank()
        got = allreduce([rank + 1 + 1000.0 * state.step] * 3, op=hvd.Sum, name="check")
        want = size * (size + 1) / 2 + 1000.0 * state.step * size
        if got != [want] * 3:
            log.write(json.dumps({"stale": got, "want": want, "step": state.step, "size": size}) + "\n")
            sys.exit(5)
        (grad,) = allreduce([1.0 - weight()], op=hvd.Average, name="grad")
        move(grad)
        state.step += 1
        record = {"step": state.step, "size": size, "rank": rank, "loss": (1.0 - weight()) ** 2}
        log.write(json.dumps({**record, "commits": state.commits}) + "\n")
        if state.step % COMMIT_EVERY == 0:
            state.commits += 1
            state.commit()
        time.sleep(pause)


train(state)
log.write(json.dumps({"done": state.step, "size": hvd.size(), "rank": hvd.rank(), "resets": resets}) + "\n")
