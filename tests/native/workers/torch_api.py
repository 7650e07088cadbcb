"""Every hvd_selector.torch function on CPU tensors, checked against exact answers.

Run under the launcher (or mpiexec): python torch_api.py OUT_DIR. Each check
compares a collective's result with the value torch computes locally from
what every rank is known to send; OUT_DIR/rank<r>.json lists the checks
that ran and the first failure of each (empty when it passed).
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

import hvd_selector.torch as hvd

out_dir = Path(sys.argv[1])
hvd.init()
rank, size = hvd.rank(), hvd.size()
results: dict[str, str] = {}


def check(name):
    def run(fn):
        try:
            fn()
            results[name] = ""
        except Exception:
            results[name] = traceback.format_exc()[-1500:]
        return fn

    return run


def same(got, want):
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want), f"{got.flatten()[:8]} != {want.flatten()[:8]}"


def value(r, dtype, n=6):
    base = torch.arange(n, dtype=torch.float64) % 5 + r + 1
    return base.to(dtype)


DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
OPS = {
    "Sum": (hvd.Sum, lambda xs: sum(xs[1:], xs[0])),
    "Min": (hvd.Min, lambda xs: torch.stack(xs).amin(0)),
    "Max": (hvd.Max, lambda xs: torch.stack(xs).amax(0)),
    "Product": (hvd.Product, lambda xs: torch.stack(xs).prod(0)),
}


@check("allreduce dtypes x ops")
def _():
    for dtype in DTYPES:
        for _op_name, (op, ref) in OPS.items():
            want = ref([value(r, torch.float64) for r in range(size)]).to(dtype)
            same(hvd.allreduce(value(rank, dtype), op=op), want)
    same(hvd.allreduce(value(rank, torch.float64)), sum(value(r, torch.float64) for r in range(size)) / size)
    same(hvd.allreduce(value(rank, torch.float64), average=False), sum(value(r, torch.float64) for r in range(size)))


@check("allreduce bool")
def _():
    mine = torch.tensor([rank == 0, False, True])
    same(hvd.allreduce(mine, op=hvd.Sum), torch.tensor([True, False, True]))
    same(hvd.allreduce(mine, op=hvd.Min), torch.tensor([False, False, True]))


@check("allreduce prescale postscale")
def _():
    got = hvd.allreduce(value(rank, torch.float64), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    same(got, sum(value(r, torch.float64) * 0.5 for r in range(size)) * 3.0)


@check("allreduce_ in place")
def _():
    t = value(rank, torch.float32)
    assert hvd.allreduce_(t, op=hvd.Sum) is t
    same(t, sum(value(r, torch.float32) for r in range(size)))


@check("grouped_allreduce and grouped_allreduce_")
def _():
    ins = [value(rank, dt, n) for dt, n in ((torch.float32, 3), (torch.int64, 5), (torch.float32, 7))]
    outs = hvd.grouped_allreduce(ins, op=hvd.Sum)
    for i, o in enumerate(outs):
        same(o, sum(value(r, ins[i].dtype, ins[i].numel()) for r in range(size)))
    hvd.grouped_allreduce_(ins, op=hvd.Max)
    for t in ins:
        same(t, value(size - 1, t.dtype, t.numel()))


@check("allgather and grouped_allgather (uneven dim 0)")
def _():
    for dtype in [*DTYPES, torch.bool]:
        mine = torch.full((rank + 1, 2), rank % 2, dtype=torch.int64).to(dtype)
        want = torch.cat([torch.full((r + 1, 2), r % 2, dtype=torch.int64).to(dtype) for r in range(size)])
        same(hvd.allgather(mine), want)
    a, b = hvd.grouped_allgather([torch.ones(rank + 1) * rank, torch.arange(2) + rank])
    same(a, torch.cat([torch.ones(r + 1) * r for r in range(size)]))
    same(b, torch.cat([torch.arange(2) + r for r in range(size)]))


@check("broadcast and broadcast_")
def _():
    root = size - 1
    for dtype in [*DTYPES, torch.bool]:
        mine = value(rank, torch.float64).to(dtype)
        got = hvd.broadcast(mine, root_rank=root)
        same(got, value(root, torch.float64).to(dtype))
        same(mine, value(rank, torch.float64).to(dtype))  # input untouched
    t = value(rank, torch.float32)
    assert hvd.broadcast_(t, root_rank=0) is t
    same(t, value(0, torch.float32))


@check("alltoall (splits, received splits, even split, ValueError)")
def _():
    splits = torch.tensor([r + 1 for r in range(size)], dtype=torch.int32)
    mine = torch.arange(int(splits.sum())) + 100 * rank
    out, received = hvd.alltoall(mine, splits=splits)
    offset = sum(range(1, rank + 1))
    want = torch.cat([torch.arange(offset, offset + rank + 1) + 100 * src for src in range(size)])
    same(out, want)
    same(received, torch.full((size,), rank + 1, dtype=torch.int32))
    even = hvd.alltoall(torch.arange(2 * size) + 10 * rank)
    same(even, torch.cat([torch.arange(2 * rank, 2 * rank + 2) + 10 * src for src in range(size)]))
    try:
        hvd.alltoall(mine, splits=splits.float())
    except ValueError:
        pass
    else:
        raise AssertionError("float splits were accepted")


@check("reducescatter and grouped_reducescatter (Horovod's row split)")
def _():
    rows = 2 * size + 1
    x = [torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) * (r + 1) for r in range(size)]
    total = sum(x)
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    count = base + (1 if rank < extra else 0)
    same(hvd.reducescatter(x[rank], op=hvd.Sum), total[start : start + count])
    same(hvd.reducescatter(x[rank]), (total / size)[start : start + count])
    a, b = hvd.grouped_reducescatter([x[rank], x[rank] * 2], op=hvd.Sum)
    same(a, total[start : start + count])
    same(b, (total * 2)[start : start + count])


@check("async handles, poll, synchronize, fusion")
def _():
    handles = [hvd.allreduce_async(torch.full((4,), float(rank + i)), op=hvd.Sum, name=f"a{i}") for i in range(8)]
    inplace = torch.full((3,), float(rank))
    h_ = hvd.allreduce_async_(inplace, op=hvd.Sum)
    hg = hvd.allgather_async(torch.ones(rank + 1))
    hb = hvd.broadcast_async(torch.full((2,), float(rank)), root_rank=0)
    hb_ = hvd.broadcast_async_(torch.full((2,), float(rank)), root_rank=size - 1)
    ha = hvd.alltoall_async(torch.arange(size) + rank)
    hr = hvd.reducescatter_async(torch.ones(size, 2), op=hvd.Sum)
    for i, h in enumerate(handles):
        same(hvd.synchronize(h), torch.full((4,), float(sum(r + i for r in range(size)))))
    hvd.synchronize(h_)
    same(inplace, torch.full((3,), float(sum(range(size)))))
    same(hvd.synchronize(hg), torch.ones(sum(range(1, size + 1))))
    same(hvd.synchronize(hb), torch.zeros(2))
    same(hvd.synchronize(hb_), torch.full((2,), float(size - 1)))
    out, _ = hvd.synchronize(ha)
    same(out, torch.arange(size) * 0 + rank + torch.arange(size))
    same(hvd.synchronize(hr), torch.full((1, 2), float(size)))
    h = hvd.allreduce_async(torch.ones(1))
    while not hvd.poll(h):
        pass
    same(hvd.synchronize(h), torch.ones(1))
    h = hvd.allreduce_async(torch.ones(1), name="dup")
    try:
        hvd.allreduce_async(torch.ones(1), name="dup")
    except ValueError:
        pass
    else:
        raise AssertionError("a duplicate in-flight name was accepted")
    hvd.synchronize(h)


@check("gradients: allreduce, allgather, broadcast, alltoall, reducescatter (analytic)")
def _():
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(t * (rank + 1), op=hvd.Sum).sum()).backward()
    same(t.grad, torch.full((3,), float(size * (rank + 1)), dtype=torch.float64))
    t = torch.ones(rank + 1, 2, dtype=torch.float64, requires_grad=True)
    g = hvd.allgather(t)
    g.backward(torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]).double())
    same(t.grad, torch.full((rank + 1, 2), float(rank), dtype=torch.float64))
    t = torch.ones(4, dtype=torch.float64, requires_grad=True)
    hvd.broadcast(t, root_rank=0).sum().backward()
    same(t.grad, torch.full((4,), 1.0 if rank == 0 else 0.0, dtype=torch.float64))
    t = torch.ones(size, dtype=torch.float64, requires_grad=True)
    (hvd.alltoall(t) * (rank + 1)).sum().backward()
    same(t.grad, torch.arange(1, size + 1, dtype=torch.float64))
    t = torch.ones(size, 2, dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(t, op=hvd.Sum).sum().backward()
    same(t.grad, torch.full((size, 2), float(size), dtype=torch.float64))


@check("gradcheck: allreduce Sum, grouped_allreduce")
def _():
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(7), requires_grad=True)
    # d/dx of allreduce(x * w_r) summed with weights: linear, so gradcheck is exact.
    assert torch.autograd.gradcheck(lambda v: hvd.allreduce(v, op=hvd.Sum), (x,))
    assert torch.autograd.gradcheck(lambda v: hvd.grouped_allreduce([v, v * 2], op=hvd.Average)[1], (x,))


@check("process sets (add, collectives, remove)")
def _():
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    members = mine.ranks
    assert mine.included() and mine.rank() == members.index(rank) and mine.size() == len(members)
    same(hvd.allreduce(torch.tensor([rank]), op=hvd.Sum, process_set=mine), torch.tensor([sum(members)]))
    same(hvd.allgather(torch.tensor([rank]), process_set=mine), torch.tensor(members))
    same(hvd.broadcast(torch.tensor([rank]), root_rank=members[0], process_set=mine), torch.tensor([members[0]]))
    hvd.barrier(process_set=mine)
    other = odds if mine is evens else evens
    if other.ranks:
        try:
            hvd.allreduce(torch.ones(1), process_set=other)
        except ValueError:
            pass
        else:
            raise AssertionError("a non-member ran a collective of a set")
    assert hvd.remove_process_set(odds) and hvd.remove_process_set(evens)
    assert not hvd.remove_process_set(evens)


@check("host staging of process-set collectives (the GPU build's path for CUDA tensors, here on CPU tensors)")
def _():
    from hvd_selector.torch import _host_staging

    pair = hvd.add_process_set(list(range(size)))
    real = _host_staging.needed
    staged = []

    def always(set_id, tensors):
        staged.append(set_id)
        return set_id != 0

    _host_staging.needed = always
    try:
        x = value(rank, torch.float32)
        want = sum(value(r, torch.float32) for r in range(size))
        same(hvd.allreduce(x, op=hvd.Sum, process_set=pair), want)
        y = x.clone()
        assert hvd.allreduce_(y, op=hvd.Sum, process_set=pair) is y
        same(y, want)
        ys = [x.clone(), x.clone() * 2]
        hvd.grouped_allreduce_(ys, op=hvd.Sum, process_set=pair)
        same(ys[1], want * 2)
        same(
            hvd.allgather(torch.tensor([rank] * (rank + 1)), process_set=pair),
            torch.repeat_interleave(torch.arange(size), torch.arange(size) + 1),
        )
        z = torch.tensor([rank, rank])
        hvd.broadcast_(z, root_rank=size - 1, process_set=pair)
        same(z, torch.tensor([size - 1, size - 1]))
        out, received = hvd.alltoall(
            torch.arange(size) + 10 * rank, splits=torch.ones(size, dtype=torch.int32), process_set=pair
        )
        same(out, torch.arange(size) * 10 + rank)
        same(received, torch.ones(size, dtype=torch.int32))
        # reducescatter rides the allreduce path: one row each
        same(hvd.reducescatter(torch.ones(size, 2), op=hvd.Sum, process_set=pair), torch.full((1, 2), float(size)))
    finally:
        _host_staging.needed = real
    assert staged and all(s == pair.process_set_id for s in staged), staged
    assert hvd.remove_process_set(pair)


@check("bad input raises at the call on that rank only, and the job goes on")
def _():
    t = torch.ones(3)
    mistakes = [
        (TypeError, lambda: hvd.allreduce(t, name=5)),
        (TypeError, lambda: hvd.allreduce_async(t, name=b"x")),
        (TypeError, lambda: hvd.allgather(t, name=3.0)),
        (TypeError, lambda: hvd.grouped_allreduce([t], name=1)),
        (TypeError, lambda: hvd.reducescatter(t, name=object())),
        (TypeError, lambda: hvd.alltoall(torch.ones(size), name=7)),
        (TypeError, lambda: hvd.broadcast(t, root_rank="0")),
        (ValueError, lambda: hvd.broadcast(t, root_rank=size)),
        (TypeError, lambda: hvd.allreduce(t, prescale_factor="2")),
        (ValueError, lambda: hvd.allreduce(t, postscale_factor=float("nan"))),
        (ValueError, lambda: hvd.allreduce(t, op=99)),
        (TypeError, lambda: hvd.allreduce(t, op="sum")),
        (TypeError, lambda: hvd.allreduce(t, process_set=[0])),
        (TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64))),
        (TypeError, lambda: hvd.join(device="cuda")),
        (NotImplementedError, lambda: hvd.allreduce(t, op=hvd.Adasum)),
    ]
    if rank == size - 1:  # only this rank makes the mistakes; the others go straight on
        for kind, call in mistakes:
            try:
                call()
            except kind as exc:
                assert "\n" not in str(exc), f"not one line: {exc}"
            else:
                raise AssertionError(f"no {kind.__name__} from a call with bad input")
    got = hvd.allreduce(torch.ones(2) * rank, op=hvd.Sum, name="after.bad.input")
    same(got, torch.full((2,), float(sum(range(size)))))


@check("a reused name is a duplicate until this process has waited since it completed")
def _():
    t = torch.ones(4)
    first = hvd.allreduce_async(t, name="reused", op=hvd.Sum)
    while not hvd.poll(first):  # completed on every rank, but this process has not waited yet
        time.sleep(0.01)
    try:
        hvd.allreduce_async(t, name="reused", op=hvd.Sum)
    except ValueError:
        pass
    else:
        raise AssertionError("a completed, unwaited name was reused without the duplicate name error")
    hvd.barrier()  # a wait: the completed collective's name is free again
    second = hvd.allreduce_async(t, name="reused", op=hvd.Sum)
    same(hvd.synchronize(second), torch.full((4,), float(size)))
    same(hvd.synchronize(first), torch.full((4,), float(size)))


@check("a process set without members (a one-rank job's odd ranks)")
def _():
    empty = hvd.add_process_set([])
    assert not empty.included() and empty.size() == 0 and empty.process_set_id is not None
    try:
        hvd.allreduce(torch.ones(1), process_set=empty)
    except ValueError:
        pass
    else:
        raise AssertionError("a collective ran on a set without members")
    assert hvd.remove_process_set(empty)


@check("errors raise on every rank and name the op")
def _():
    for name, call in (
        ("allreduce", lambda: hvd.allreduce(torch.ones(3 + rank))),
        ("allreduce", lambda: hvd.allreduce(torch.ones(3, dtype=torch.float32 if rank else torch.float64))),
        ("broadcast", lambda: hvd.broadcast(torch.ones(2), root_rank=rank)),
        ("allgather", lambda: hvd.allgather(torch.ones(2, 1 + rank))),
        # one rank's tensors on another kind of device (meta stands in for CUDA: the check is the same)
        ("allreduce", lambda: hvd.allreduce(torch.ones(3, device="meta" if rank else "cpu"))),
    ):
        try:
            call()
        except hvd.MismatchError as exc:
            assert str(exc).startswith(name), str(exc)
        else:
            raise AssertionError(f"{name} mismatch did not raise")
    same(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size)))  # still usable


@check("a joined rank's zeros go to the others' kind of device (join's GPU, else the core's)")
def _():
    from hvd_selector.torch._engine import zeros_device

    assert zeros_device("cpu", 3, 1, 4) == torch.device("cpu")
    assert zeros_device("cuda", 2, 1, 4) == torch.device("cuda", 2)  # join(device=2)
    assert zeros_device("cuda", -1, 5, 4) == torch.device("cuda", 1)  # local_rank 5 of 4 GPUs, as NCCL's
    try:
        zeros_device("cuda", -1, 0, 0)
    except hvd.UnavailableError as exc:
        assert "no" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("zeros on a GPU with none visible")


@check("broadcast_object, allgather_object, broadcast_parameters, broadcast_optimizer_state")
def _():
    obj = {"rank": rank, "t": torch.arange(3) * rank, "s": f"r{rank}", "l": [1, (2, 3)]}
    got = hvd.broadcast_object(obj, root_rank=size - 1)
    assert got["rank"] == size - 1 and got["s"] == f"r{size - 1}" and got["l"] == [1, (2, 3)]
    same(got["t"], torch.arange(3) * (size - 1))
    assert hvd.allgather_object({"r": rank}) == [{"r": r} for r in range(size)]
    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    same(model.weight.detach(), ref.weight.detach())
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01


@check("DistributedOptimizer: averaged gradients, backward_passes_per_step, groups, fp16, predivide")
def _():
    for kwargs in (
        {},
        {"backward_passes_per_step": 2},
        {"groups": 2},
        {"compression": hvd.Compression.fp16},
        {"gradient_predivide_factor": 2.0},
        {"op": hvd.Sum},
    ):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1, bias=False)
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=1.0), named_parameters=model.named_parameters(), **kwargs
        )
        passes = kwargs.get("backward_passes_per_step", 1)
        for _ in range(passes):
            model(torch.full((1, 4), float(rank + 1))).sum().backward()
        opt.step()
        mean = sum(r + 1 for r in range(size)) / size * passes
        factor = size if kwargs.get("op") == hvd.Sum else 1
        torch.manual_seed(0)
        start = torch.nn.Linear(4, 1, bias=False).weight.detach()
        same(model.weight.detach(), start - mean * factor)


@check("collectives match by name: other orders, one held across a barrier, duplicates")
def _():
    names = ["first", "second", "third"]
    order = names if rank % 2 == 0 else names[::-1]
    handles = {}
    for n in order:  # rank 1 submits them in the reverse order
        handles[n] = hvd.allreduce_async(torch.full((3,), float(rank + names.index(n))), op=hvd.Sum, name=n)
    for i, n in enumerate(names):
        same(hvd.synchronize(handles[n]), torch.full((3,), float(sum(r + i for r in range(size)))))
    for holder in range(size):  # submitted before a barrier on one rank, after it on the others
        held = None
        if rank == holder:
            held = hvd.allgather_async(torch.tensor([rank]), name=f"held{holder}")
            try:  # it cannot have completed: the others submit it after the barrier
                hvd.allgather_async(torch.tensor([rank]), name=f"held{holder}")
            except ValueError as exc:
                assert f"held{holder}" in str(exc), str(exc)
            else:
                raise AssertionError("a second collective with an in-flight name was accepted")
        hvd.barrier()
        if rank != holder:
            held = hvd.allgather_async(torch.tensor([rank]), name=f"held{holder}")
        same(hvd.synchronize(held), torch.arange(size))
    same(hvd.synchronize(hvd.allgather_async(torch.tensor([rank]), name="held0")), torch.arange(size))


@check("join: joined ranks stand in with zeros and pass barriers; allgather/broadcast fail; last to join")
def _():
    for first in range(size):
        if rank == first:
            last = hvd.join()
        else:
            ha = hvd.allreduce_async(torch.full((5,), 4 * (rank + 1), dtype=torch.int32), name="ja", op=hvd.Sum)
            hb = hvd.allreduce_async(torch.full((2, 3), 2.0 * (rank + 1)), name="jb")  # Average
            others = [r for r in range(size) if r != first]
            same(hvd.synchronize(ha), torch.full((5,), sum(4 * (r + 1) for r in others), dtype=torch.int32))
            same(hvd.synchronize(hb), torch.full((2, 3), sum(2.0 * (r + 1) for r in others) / size))
            for what, call in (
                ("allgather", lambda: hvd.allgather(torch.ones(2))),
                ("broadcast", lambda: hvd.broadcast(torch.ones(2), root_rank=rank)),
            ):
                try:
                    call()
                except hvd.HorovodInternalError as exc:
                    assert "Join" in str(exc), str(exc)
                else:
                    raise AssertionError(f"{what} while a rank had joined did not raise")
            hvd.barrier()  # the joined rank takes part in barriers
            last = hvd.join()
        assert last != first or size == 1, (last, first)
        assert hvd.allgather_object(last) == [last] * size


@check("DistributedOptimizer sparse_as_dense with SparseAdam")
def _():
    for dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(
            torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
            named_parameters=emb.named_parameters(),
            sparse_as_dense=dense,
        )
        idx = [torch.tensor([1, 2, 4, 4]), torch.tensor([4, 7, 9])]
        emb(idx[rank % 2]).sum().backward()
        opt.synchronize()
        grad = emb.weight.grad
        assert grad is not None and grad.is_sparse, "SparseAdam needs a sparse gradient"
        want = torch.zeros(10, 3)
        for r in range(size):
            for i in idx[r % 2].tolist():
                want[i] += 1.0 / size
        same(grad.to_dense(), want)
        with opt.skip_synchronize():
            opt.step()


@check("build queries and join")
def _():
    facts = hvd.build_info()
    assert hvd.gloo_built() == ("gloo" in facts["controllers"])
    assert hvd.mpi_built() == ("mpi" in facts["controllers"])
    assert type(hvd.nccl_built()) is int and hvd.nccl_built() == 0  # Horovod: NCCL_VERSION_CODE or 0
    assert not hvd.cuda_built() and not hvd.rocm_built() and not hvd.ddl_built() and not hvd.ccl_built()
    assert hvd.mpi_enabled() == (os.environ.get("HVD_SELECTOR_RENDEZVOUS") is None) != hvd.gloo_enabled()
    if hvd.mpi_enabled():
        assert hvd.mpi_threads_supported() is False  # the core asks for MPI_THREAD_SERIALIZED
    else:
        try:
            hvd.mpi_threads_supported()
        except ValueError:
            pass
        else:
            raise AssertionError("mpi_threads_supported() without MPI did not raise Horovod's ValueError")
    assert 0 <= hvd.join() < size


(out_dir / f"rank{rank}.json").write_text(json.dumps(results))
hvd.shutdown()
if os.environ.get("HVD_SELECTOR_RENDEZVOUS"):  # gloo: a second init() works after shutdown()
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size
    hvd.shutdown()
    # A collective that one rank never submits fails there after HVD_SELECTOR_TIMEOUT, naming the
    # missing rank; the job goes on. Then a rank that shuts down while another waits: the wait
    # ends with PeerFailureError naming it, and both start over.
    os.environ["HVD_SELECTOR_TIMEOUT"] = "3"
    hvd.init()
    tail: dict[str, str] = {}
    lonely = hvd.allreduce_async(torch.ones(1), name="lonely") if rank == 0 else None
    hvd.barrier()
    if rank != 0:
        time.sleep(3.5)  # past rank 0's timeout for 'lonely', so rank 1's next collective does not wait long
    if rank == 0:
        try:
            hvd.synchronize(lonely)
            tail["timeout"] = "the lonely allreduce did not fail"
        except hvd.CollectiveTimeoutError as exc:
            if "rank(s) 1" not in str(exc) or "lonely" not in str(exc):
                tail["timeout"] = str(exc)
    # named: rank 0 used one more handle, so unnamed collectives would not match (as in Horovod)
    same(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after"), torch.full((1,), float(size)))
    waiting = hvd.allreduce_async(torch.ones(1), name="never") if rank == 0 else None
    hvd.barrier()
    if rank == 0:
        try:
            hvd.synchronize(waiting)
            tail["bye"] = "the wait did not end"
        except hvd.PeerFailureError as exc:
            if "rank(s) 1 shut down" not in str(exc):
                tail["bye"] = str(exc)
    if rank != 0:
        hvd.shutdown()  # rank 0's engine stopped on the PeerFailureError: init() alone starts it over
    os.environ["HVD_SELECTOR_TIMEOUT"] = "20"
    hvd.init()
    same(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(size)))
    hvd.shutdown()
    (out_dir / f"tail{rank}.json").write_text(json.dumps(tail))
