"""Horovod's ``horovod.torch.mpi_ops`` over hvd-selector's native core.

Every collective is a Work item for the background engine (_engine.py);
the synchronous forms enqueue and wait. The differentiable forms are
autograd Functions whose backward passes are collectives themselves, as in
Horovod (allreduce -> allreduce, allgather -> averaged slice, broadcast ->
averaged gradient kept on the root, alltoall -> alltoall back,
reducescatter -> allgather).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .. import _api
from .._api import HorovodInternalError  # Horovod exports it from here too
from . import _checks, _host_staging
from . import process_sets as _ps
from ._engine import JOIN, Engine, Request, Work, describe
from .compression import Compression
from .process_sets import ProcessSet, global_process_set

Sum = _api.Sum
Average = _api.Average
Min = _api.Min
Max = _api.Max
Product = _api.Product
Adasum = _checks.Adasum

_engine: Engine | None = None
_engine_lock = threading.Lock()
_handles: dict[int, Work | Callable[[], Any]] = {}
_pending_names: dict[tuple[int, str], Work] = {}
_handle_ids = itertools.count(1)
_waited = 0.0  # when this process last came back from waiting for a collective (time.monotonic())


# ------------------------------------------------------------ lifecycle
def init(*args: Any, process_sets: Sequence[ProcessSet] | None = None, **kwargs: Any) -> None:
    """Join the job (see hvd_selector.init) and start the background engine.

    ``process_sets``: sets to register right away, as Horovod's init() takes.
    A second init() is a no-op while the engine runs; after the engine
    stopped on an error (a peer failed, a collective timed out) it starts
    over as shutdown() then init() would, so every rank that calls init()
    again meets the others in a fresh job.
    """
    global _engine
    with _engine_lock:
        engine = _engine
    if engine is not None and engine.dead is not None:
        shutdown()
    with _engine_lock:
        if _api.is_initialized() and _engine is not None:
            return
        _api.init()
        _ps.reset()
        _engine = Engine(_api.fusion_threshold, _api.timeout())
    for ps in process_sets or ():
        add_process_set(ps)


def shutdown() -> None:
    """Drain the engine and leave the job; init() may be called again afterwards."""
    global _engine
    with _engine_lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.stop()
    global _handle_ids
    _handle_ids = itertools.count(1)  # Horovod resets its handles here: unnamed collectives match afresh
    _handles.clear()
    _pending_names.clear()
    _ps.reset()
    _api.shutdown()


def is_initialized() -> bool:
    return _api.is_initialized()


def _the_engine() -> Engine:
    if _engine is None or not _api.is_initialized():
        raise ValueError("hvd_selector.torch is not initialised; call hvd_selector.torch.init() first")
    return _engine


def rank() -> int:
    return _api.rank()


def size() -> int:
    return _api.size()


def local_rank() -> int:
    return _api.local_rank()


def local_size() -> int:
    return _api.local_size()


def cross_rank() -> int:
    """Index of this rank's host (ranks are placed host by host, local_size each)."""
    return _api.rank() // max(_api.local_size(), 1)


def cross_size() -> int:
    return max(_api.size() // max(_api.local_size(), 1), 1)


# ------------------------------------------------------------ build queries (Horovod's types)
def _facts() -> Any:
    assert _api._facts is not None
    return _api._facts


def mpi_built() -> bool:
    return "mpi" in _facts().controllers


def gloo_built() -> bool:
    return "gloo" in _facts().controllers


def mpi_enabled() -> bool:
    """True when this process's communicator is MPI (not only built with it)."""
    return _api.is_initialized() and _api._rendezvous is None


def gloo_enabled() -> bool:
    return _api.is_initialized() and _api._rendezvous is not None


def mpi_threads_supported() -> bool:
    """Whether other code may call MPI from its own threads beside Horovod (Horovod: MPI_THREAD_MULTIPLE).

    The core asks MPI for MPI_THREAD_SERIALIZED (its calls come from one
    thread at a time), so the answer is False; without MPI it is Horovod's
    ValueError.
    """
    if not mpi_enabled():
        raise ValueError("Horovod MPI is not enabled: this job runs on Gloo (mpi_enabled() is False)")
    return False


def nccl_version_code(version: str) -> int:
    """NCCL's NCCL_VERSION_CODE for "major.minor.patch" (the encoding changed at 2.9)."""
    major, minor, patch = (int(part) for part in version.split("."))
    if (major, minor) >= (2, 9):
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def nccl_built() -> int:
    """The NCCL version this build was compiled against as NCCL_VERSION_CODE (22809 for 2.28.9); 0 without NCCL."""
    facts = _facts()
    if facts.tensor_ops != "nccl":
        return 0
    version = str(facts.config.get("nccl_version", ""))
    try:
        return nccl_version_code(version)
    except ValueError:
        from .._guard import reinstall_command

        raise HorovodInternalError(
            f"this NCCL build records no NCCL version in build_config.json ({version!r}); "
            f"reinstall: {reinstall_command()}"
        ) from None


def cuda_built() -> bool:
    return bool(_facts().cuda_archs)


def rocm_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    raise NotImplementedError("hvd_selector.torch has no timeline (Horovod's HOROVOD_TIMELINE)")


def stop_timeline() -> None:
    raise NotImplementedError("hvd_selector.torch has no timeline (Horovod's HOROVOD_TIMELINE)")


# ------------------------------------------------------------ submitting
def _request(
    what: str,
    ps: ProcessSet,
    name: Any,
    tensors: Sequence[torch.Tensor] = (),
    op: int = -1,
    pre: Any = 1.0,
    post: Any = 1.0,
    root: int = -1,
) -> Request:
    """The description the ranks negotiate on, every field checked here (name None: filled in from the handle)."""
    set_id = _ps.id_of(ps, what)
    label = _checks.name(name, what)
    pre = _checks.scale(pre, what, "prescale_factor")
    post = _checks.scale(post, what, "postscale_factor")
    dtypes, shapes, device = describe(tensors)
    members = tuple(ps._members()) if set_id else ()
    return Request(set_id, label or "", what, dtypes, shapes, op, pre, post, root, members, device)


def _submit(work: Work) -> int:
    """Queue `work` for the engine; returns its handle.

    Ranks match collectives by name (Horovod's coordinator): an unnamed one
    is named after its handle, as Horovod names it, so unnamed collectives
    match when every rank submits them in the same order. A name stays taken
    until its handle is synchronized, or until it has completed and this
    process has waited for some collective since: completion is noticed at
    this process's own waits, never behind its back, so whether a reused
    name is a duplicate does not depend on how fast the peers are.
    """
    engine = _the_engine()
    handle = next(_handle_ids)
    if not work.request.name:
        work.request = work.request._replace(name=f"{work.what}.noname.{handle}")
    key = work.request.key
    other = _pending_names.get(key)
    if other is not None and not (other.done.is_set() and other.finished <= _waited):
        raise ValueError(
            f"{work.what}: a collective named {work.name!r} is still in flight; names must be unique until it "
            "completes (Horovod's duplicate name error)"
        )
    _pending_names[key] = work
    engine.submit(work)
    _handles[handle] = work
    return handle


def _engine_call(
    what: str, run: Callable[[], Any], process_set: ProcessSet = global_process_set, name: str | None = None
) -> Any:
    """Run `run` on the engine thread once every rank of the set asked for it (by name)."""
    return synchronize(_submit(Work(_request(what, process_set, name), run=lambda peers: run())))


def poll(handle: int) -> bool:
    """True when the collective behind `handle` has finished (synchronize() won't block)."""
    work = _handles.get(handle)
    if work is None:
        raise ValueError(f"poll: unknown handle {handle!r}")
    return True if callable(work) and not isinstance(work, Work) else work.done.is_set()


def synchronize(handle: int) -> Any:
    """Wait for the collective behind `handle` and return its result (or raise its error)."""
    global _waited
    work = _handles.pop(handle, None)
    if work is None:
        raise ValueError(f"synchronize: unknown handle {handle!r}")
    if not isinstance(work, Work):
        return work()
    engine = _engine
    if engine is not None:
        engine.wait(work)
    else:
        work.done.wait()
    _waited = time.monotonic()
    if _pending_names.get(work.request.key) is work:
        del _pending_names[work.request.key]
    if work.error is not None:
        raise work.error
    return work.result


# ------------------------------------------------------------ process sets
def add_process_set(process_set: ProcessSet | Iterable[int]) -> ProcessSet:
    """Register a set on every rank (call it on all ranks, in the same order); returns it registered."""
    ps, reg = _ps.reserve(process_set)
    _engine_call(
        "add_process_set",
        lambda: _api._connect_process_set(reg.set_id, reg.members, reg.seq) if _api.rank() in reg.members else None,
        name=f"process_set.add.{reg.seq}",
    )
    return _ps.commit(ps, reg.set_id)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a set (every rank, same order); False when it was not registered."""
    set_id = _ps.registered_id(process_set)
    if set_id is None:
        return False
    _engine_call(
        "remove_process_set",
        lambda: _api._core.remove_process_set(set_id) if process_set.included() else None,
        name=f"process_set.remove.{set_id}",
    )
    _ps.forget(process_set)
    return True


# ------------------------------------------------------------ allreduce
def _allreduce_work(
    what: str,
    ins: list[torch.Tensor],
    outs: list[torch.Tensor],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: ProcessSet,
    name: str | None,
    single: bool,
    originals: Sequence[torch.Tensor] | None = None,
) -> int:
    request = _request("allreduce", process_set, name, ins, op, prescale_factor, postscale_factor)
    results = list(originals) if originals is not None else None  # in place: the caller's own tensors

    def finish(outputs: list[Any]) -> Any:
        done = results if results is not None else outputs
        return done[0] if single else list(done)

    return _submit(Work(request, ins=ins, outs=outs, finish=finish))


def allreduce_async(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an allreduce; the input is untouched, synchronize() returns a new tensor."""
    t = _checks.tensor(tensor, "allreduce").contiguous()
    out = torch.empty_like(t, memory_format=torch.contiguous_format)
    return _allreduce_work(
        "allreduce", [t], [out], _checks.op(average, op), prescale_factor, postscale_factor, process_set, name, True
    )


def allreduce_async_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    """Start an in-place allreduce of `tensor`."""
    t = _checks.contiguous(_checks.tensor(tensor, "allreduce_"), "allreduce_")
    return _allreduce_work(
        "allreduce",
        [t],
        [t],
        _checks.op(average, op),
        prescale_factor,
        postscale_factor,
        process_set,
        name,
        True,
        [tensor],
    )


class HorovodAllreduce(torch.autograd.Function):
    """allreduce whose gradient is the same allreduce of the incoming gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: int, pre: float, post: float, ps: ProcessSet, name: Any) -> Any:
        ctx.args = (op, pre, post, ps)
        return synchronize(allreduce_async(tensor, None, name, op, pre, post, ps))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        op, pre, post, ps = ctx.args
        return allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps), *[None] * 5


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: Any = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """Reduce `tensor` across the set's ranks (differentiable); the input is untouched."""
    the_op = _checks.op(average, op)
    compressed, cctx = compression.compress(tensor)
    out = HorovodAllreduce.apply(compressed, the_op, prescale_factor, postscale_factor, process_set, name)
    return compression.decompress(out, cctx)


def allreduce_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> torch.Tensor:
    """In-place allreduce; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(
    what: str,
    tensors: Sequence[torch.Tensor],
    in_place: bool,
    average: bool | None,
    name: str | None,
    op: int | None,
    prescale_factor: float,
    postscale_factor: float,
    process_set: ProcessSet,
) -> int:
    if in_place:
        ins = [_checks.contiguous(_checks.tensor(t, what), what) for t in tensors]
        outs, originals = ins, list(tensors)
    else:
        ins = [_checks.tensor(t, what).contiguous() for t in tensors]
        outs, originals = [torch.empty_like(t) for t in ins], None
    the_op = _checks.op(average, op, what)
    return _allreduce_work(
        "grouped_allreduce", ins, outs, the_op, prescale_factor, postscale_factor, process_set, name, False, originals
    )


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    args = (average, name, op, prescale_factor, postscale_factor, process_set)
    return _grouped_allreduce_async("grouped_allreduce", tensors, False, *args)


def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> int:
    args = (average, name, op, prescale_factor, postscale_factor, process_set)
    return _grouped_allreduce_async("grouped_allreduce_", tensors, True, *args)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, op: int, pre: float, post: float, ps: ProcessSet, name: Any, *tensors: torch.Tensor) -> Any:
        ctx.args = (op, pre, post, ps)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, pre, post, ps)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        op, pre, post, ps = ctx.args
        out = grouped_allreduce(list(grads), op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
        return None, None, None, None, None, *out


def grouped_allreduce(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    compression: Any = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> list[torch.Tensor]:
    the_op = _checks.op(average, op)
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedAllreduce.apply(
        the_op, prescale_factor, postscale_factor, process_set, name, *[p[0] for p in pairs]
    )
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


def grouped_allreduce_(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSet = global_process_set,
) -> list[torch.Tensor]:
    return synchronize(
        grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    )


def sparse_allreduce_async(
    tensor: torch.Tensor, name: str | None, op: int, process_set: ProcessSet = global_process_set
) -> Callable[[], torch.Tensor]:
    """Allgather a sparse tensor's indices and values; the handle coalesces (sums) them."""
    t = tensor.detach().coalesce()
    label = (lambda part: f"{name}.{part}") if name else (lambda part: None)  # Horovod's names
    indices = allgather_async(t._indices().t().contiguous(), name=label("indices"), process_set=process_set)
    values = allgather_async(t._values().contiguous(), name=label("values"), process_set=process_set)
    n = process_set.size()

    def handle() -> torch.Tensor:
        vals, idx = synchronize(values), synchronize(indices)
        if op == Average:
            vals = vals / n
        return torch.sparse_coo_tensor(idx.t(), vals, size=t.shape).coalesce()

    return handle


# ------------------------------------------------------------ allgather
def _gather_input(tensor: torch.Tensor, what: str) -> torch.Tensor:
    t = _checks.tensor(tensor, what).contiguous()
    if t.dim() == 0:
        raise ValueError(f"{what}: needs at least one dimension (got a scalar)")
    return t


def _allgather(t: torch.Tensor, dims: list[int], on_host: bool) -> torch.Tensor:
    """Gather with every member's dim 0 as agreed in the negotiation (no second agreement round)."""
    src = t.cpu() if on_host else t
    out = src.new_empty((sum(dims), *t.shape[1:]))
    _api._core.allgather(src, out, dims)
    return out.to(t.device)


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set) -> int:
    t = _gather_input(tensor, "allgather")
    request = _request("allgather", process_set, name, [t])
    on_host = _host_staging.needed(request.set_id, [t])

    def run(peers: list[Request]) -> torch.Tensor:
        return _allgather(t, [p.shapes[0][0] for p in peers], on_host)

    return _submit(Work(request, run=run))


def _narrow_for_rank(grad: torch.Tensor, dim: int, ps: ProcessSet) -> torch.Tensor:
    dims = allgather(torch.tensor([dim], dtype=torch.int64), process_set=ps)
    offset = int(dims[: ps.rank()].sum().item())
    return grad.narrow(0, offset, dim)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Any, ps: ProcessSet) -> Any:
        ctx.dim, ctx.ps = int(tensor.shape[0]) if tensor.dim() else 0, ps
        return synchronize(allgather_async(tensor, name, ps))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        reduced = allreduce(grad, op=Average, process_set=ctx.ps)
        return _narrow_for_rank(reduced, ctx.dim, ctx.ps), None, None


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set) -> Any:
    """Concatenate every rank's tensor along dim 0 (differentiable)."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(
    tensors: Sequence[torch.Tensor], name: str | None = None, process_set: ProcessSet = global_process_set
) -> int:
    ts = [_gather_input(t, "grouped_allgather") for t in tensors]
    request = _request("allgather", process_set, name, ts)
    on_host = _host_staging.needed(request.set_id, ts)

    def run(peers: list[Request]) -> list[torch.Tensor]:
        return [_allgather(t, [p.shapes[i][0] for p in peers], on_host) for i, t in enumerate(ts)]

    return _submit(Work(request, run=run))


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Any, ps: ProcessSet, *tensors: torch.Tensor) -> Any:
        ctx.dims, ctx.ps = [int(t.shape[0]) if t.dim() else 0 for t in tensors], ps
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, ps)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.ps)
        return None, None, *[_narrow_for_rank(g, d, ctx.ps) for g, d in zip(reduced, ctx.dims, strict=True)]


def grouped_allgather(
    tensors: Sequence[torch.Tensor], name: str | None = None, process_set: ProcessSet = global_process_set
) -> list[torch.Tensor]:
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ------------------------------------------------------------ broadcast
def _set_root(root_rank: Any, ps: ProcessSet) -> tuple[int, int]:
    """Horovod names the root by its global rank; the set's communicator by its place in the set."""
    root = _checks.root(root_rank, "broadcast")
    if _ps.id_of(ps, "broadcast") == 0:
        return root, root
    members = ps._members()
    if root not in members:
        raise ValueError(f"broadcast: root_rank {root} is not a member of {ps!r}")
    return root, members.index(root)


def _broadcast_work(
    t: torch.Tensor, root_rank: Any, name: str | None, ps: ProcessSet, result: torch.Tensor | None = None
) -> int:
    root, set_root = _set_root(root_rank, ps)
    request = _request("broadcast", ps, name, [t], root=root)
    on_host = _host_staging.needed(request.set_id, [t])

    def run(peers: list[Request]) -> torch.Tensor:
        if on_host:
            _host_staging.run_on_host(lambda ins, outs: _api._core.broadcast(outs[0], set_root), [t], [t])
        else:
            _api._core.broadcast(t, set_root)
        return t if result is None else result

    return _submit(Work(request, run=run))


def broadcast_async(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: ProcessSet = global_process_set
) -> int:
    """Start a broadcast into a new tensor (the input is untouched)."""
    return _broadcast_work(_checks.tensor(tensor, "broadcast").clone(), root_rank, name, process_set)


def broadcast_async_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: ProcessSet = global_process_set
) -> int:
    """Start a broadcast into `tensor` itself."""
    t = _checks.contiguous(_checks.tensor(tensor, "broadcast_"), "broadcast_")
    return _broadcast_work(t, root_rank, name, process_set, result=tensor)


class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: Any, ps: ProcessSet) -> Any:
        ctx.root, ctx.ps = root_rank, ps
        return synchronize(broadcast_async(tensor, root_rank, name, ps))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        reduced = allreduce(grad, op=Average, process_set=ctx.ps)
        if _api.rank() != ctx.root:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: ProcessSet = global_process_set
) -> Any:
    """root_rank's tensor on every rank (differentiable: the gradient goes back to the root)."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: ProcessSet = global_process_set
) -> torch.Tensor:
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ------------------------------------------------------------ alltoall
def _splits(splits: Any, n: int) -> list[int] | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError(f"alltoall: splits must be an int32 tensor, got {splits.dtype}")
        return [int(s) for s in splits.tolist()]
    if isinstance(splits, Sequence) and all(isinstance(s, int | np.integer) for s in splits):
        return [int(s) for s in splits]
    raise ValueError("alltoall: splits must be an int32 tensor (or a list of ints)")


def alltoall_async(
    tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: ProcessSet = global_process_set
) -> int:
    """Start an alltoall; synchronize() returns (output, received_splits)."""
    t = _gather_input(tensor, "alltoall")
    _ps.id_of(process_set, "alltoall")
    n = process_set.size()
    mine = _splits(splits, n)
    rows = int(t.shape[0])
    if mine is None:  # checked here, before the other ranks are asked (Horovod checks at enqueue)
        if rows % n:
            raise ValueError(f"alltoall: dim 0 ({rows}) is not divisible by the set size ({n}); pass splits=")
        mine = [rows // n] * n
    if len(mine) != n:
        raise ValueError(f"alltoall: splits has {len(mine)} entries but the set has {n} ranks")
    if min(mine) < 0 or sum(mine) != rows:
        raise ValueError(f"alltoall: splits {mine} must be non-negative and add up to dim 0 ({rows})")
    send = mine
    # received splits come back where the splits were given (Horovod: splits.new()), else on the CPU
    splits_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")
    request = _request("alltoall", process_set, name, [t])
    on_host = _host_staging.needed(request.set_id, [t])

    def run(peers: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
        src = t.cpu() if on_host else t
        recv = _api._core.alltoall_prepare(src, send)
        out = src.new_empty((sum(recv), *t.shape[1:]))
        _api._core.alltoall(src, send, out, recv)
        return out.to(t.device), torch.tensor(recv, dtype=torch.int32, device=splits_device)

    return _submit(Work(request, run=run))


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: Any, ps: ProcessSet) -> Any:
        out, received = synchronize(alltoall_async(tensor, splits, name, ps))
        ctx.received, ctx.ps = received, ps
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> Any:
        back, _ = alltoall(grad.contiguous(), splits=ctx.received, process_set=ctx.ps)
        return back, None, None, None


def alltoall(
    tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: ProcessSet = global_process_set
) -> Any:
    """Send splits[i] rows to rank i; returns the output, plus received splits when splits is given."""
    _splits(splits, 0)  # ValueError here, before anything is queued
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ------------------------------------------------------------ reducescatter
def _scatter_rows(rows: int, n: int, r: int) -> tuple[int, int]:
    """Horovod's split of dim 0: the first rows % n ranks get one more row."""
    base, extra = divmod(rows, n)
    start = r * base + min(r, extra)
    return start, base + (1 if r < extra else 0)


def _reducescatter_work(
    what: str,
    tensors: list[torch.Tensor],
    op: int,
    pre: float,
    post: float,
    ps: ProcessSet,
    name: str | None,
    single: bool,
) -> int:
    op = _checks.op(None, op, what)  # Adasum: NotImplementedError, a RuntimeError as Horovod raises
    if op not in (Sum, Average):
        raise ValueError(f"{what}: op must be Sum or Average")
    _ps.id_of(ps, what)
    ins = []
    for t in tensors:
        t = _checks.tensor(t, what).contiguous()
        if t.dim() == 0:
            raise ValueError(f"{what}: needs at least one dimension (got a scalar)")
        ins.append(t)
    outs = [torch.empty_like(t) for t in ins]

    def finish(reduced: list[torch.Tensor]) -> Any:
        n, r = ps.size(), ps.rank()
        parts = []
        for full in reduced:
            start, count = _scatter_rows(int(full.shape[0]), n, r)
            parts.append(full.narrow(0, start, count).clone())
        return parts[0] if single else parts

    return _submit(Work(_request("reducescatter", ps, name, ins, op, pre, post), ins=ins, outs=outs, finish=finish))


def reducescatter_async(
    tensor: torch.Tensor,
    name: str | None = None,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    return _reducescatter_work(
        "reducescatter", [tensor], op, prescale_factor, postscale_factor, process_set, name, True
    )


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Any, op: int, ps: ProcessSet, pre: float, post: float) -> Any:
        ctx.args = (op, ps, pre, post)
        return synchronize(reducescatter_async(tensor, name, op, ps, pre, post))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        op, ps, pre, post = ctx.args
        factor = (ps.size() if op == Sum else 1.0) * pre * post
        return allgather(grad * factor if factor != 1.0 else grad, process_set=ps), None, None, None, None, None


def reducescatter(
    tensor: torch.Tensor,
    name: str | None = None,
    compression: Any = Compression.none,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> torch.Tensor:
    """Reduce across the set, then rank r keeps its share of dim 0 (differentiable)."""
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name: str | None = None,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    return _reducescatter_work(
        "grouped_reducescatter", list(tensors), op, prescale_factor, postscale_factor, process_set, name, False
    )


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Any, op: int, ps: ProcessSet, pre: float, post: float, *tensors: torch.Tensor) -> Any:
        ctx.args = (op, ps, pre, post)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, ps, pre, post)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        op, ps, pre, post = ctx.args
        factor = (ps.size() if op == Sum else 1.0) * pre * post
        gathered = grouped_allgather([g * factor for g in grads], process_set=ps)
        return None, None, None, None, None, *gathered


def grouped_reducescatter(
    tensors: Sequence[torch.Tensor],
    name: str | None = None,
    compression: Any = Compression.none,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[torch.Tensor]:
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedReducescatter.apply(
        name, op, process_set, prescale_factor, postscale_factor, *[p[0] for p in pairs]
    )
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


# ------------------------------------------------------------ barrier, join
def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Wait until every rank of the set gets here (a rank that joined takes part, as in Horovod)."""
    _engine_call("barrier", _api._core.barrier, process_set, name="barrier.noname")


def join(device: int = -1) -> int:
    """Leave the remaining collectives to the other ranks; returns the rank that joined last.

    Horovod's semantics: until every rank has joined, this rank stands in
    with zeros for the allreduces the others still run (their averages are
    still divided by size()); an allgather, broadcast, alltoall or
    reducescatter while some rank has joined fails on the others.
    """
    device = _checks.integer(device, "join", "device")
    return int(synchronize(_submit(Work(Request(JOIN[0], JOIN[1], "join"), join_device=device))))
