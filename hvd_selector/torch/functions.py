"""Training helpers: broadcast model parameters, optimizer state and objects.

Objects travel as ``torch.save`` bytes and are read back with
``torch.load(weights_only=True)``: tensors, containers, numbers and strings
load, but no arbitrary code runs on the receiving rank (no plain pickle over
the network). An object outside that set (an instance of your own class)
raises a ValueError naming HVD_SELECTOR_OBJECT_PICKLE; setting it to 1
accepts full pickle between the ranks of your own authenticated job.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from typing import Any

import torch

from . import mpi_ops
from .process_sets import ProcessSet, global_process_set

PICKLE_ENV = "HVD_SELECTOR_OBJECT_PICKLE"


def _dumps(obj: Any) -> torch.Tensor:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _loads(data: torch.Tensor) -> Any:
    raw = io.BytesIO(data.numpy().tobytes())
    full = os.environ.get(PICKLE_ENV, "") == "1"
    try:
        return torch.load(raw, weights_only=not full)
    except Exception as exc:
        if full:
            raise
        raise ValueError(
            f"received an object that only full pickle can rebuild ({exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0]}); send tensors, containers, numbers or strings, or set "
            f"{PICKLE_ENV}=1 on every rank to accept pickle from the ranks of this job"
        ) from None


def broadcast_object(
    obj: Any, root_rank: int = 0, name: str | None = None, process_set: ProcessSet = global_process_set
) -> Any:
    """root_rank's `obj` on every rank of the set.

    As in Horovod, the collectives are named after `name` (default: the
    object's type name), so ranks match them by name.
    """
    name = name or type(obj).__name__
    payload = _dumps(obj) if mpi_ops.rank() == root_rank else torch.empty(0, dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.int64)
    length = mpi_ops.broadcast_(size, root_rank, name=f"{name}.sz", process_set=process_set)
    if mpi_ops.rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=f"{name}.t", process_set=process_set)
    return obj if mpi_ops.rank() == root_rank else _loads(payload)


def allgather_object(obj: Any, name: str | None = None, process_set: ProcessSet = global_process_set) -> list[Any]:
    """Every rank's `obj`, as a list in rank order (collectives named as in broadcast_object)."""
    name = name or type(obj).__name__
    payload = _dumps(obj)
    size = torch.tensor([payload.numel()], dtype=torch.int64)
    sizes = mpi_ops.allgather(size, name=f"{name}.sz", process_set=process_set)
    data = mpi_ops.allgather(payload, name=f"{name}.t", process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(_loads(data[offset : offset + n]))
        offset += n
    return out


def broadcast_parameters(params: Any, root_rank: int, process_set: ProcessSet = global_process_set) -> None:
    """Overwrite every rank's tensors with root_rank's, in place.

    `params` is a state_dict, ``model.named_parameters()``, a list of
    (name, tensor) pairs or of tensors, as in Horovod.
    """
    if isinstance(params, dict):
        items: Iterable[tuple[str, Any]] = sorted(params.items())
    elif isinstance(params, list | Iterable):
        items = list(params)
    else:
        raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}")
    handles = []
    for entry in items:
        if isinstance(entry, torch.Tensor):  # model.parameters(): unnamed, as Horovod allows
            entry = (None, entry)
        if not isinstance(entry, tuple) or len(entry) != 2:
            raise ValueError("broadcast_parameters: expected (name, tensor) pairs, tensors or a state_dict")
        name, tensor = entry
        if tensor is None or not isinstance(tensor, torch.Tensor):
            continue
        label = name if isinstance(name, str) else None  # Horovod names each broadcast after its parameter
        handles.append(mpi_ops.broadcast_async_(tensor.data, root_rank, name=label, process_set=process_set))
    for handle in handles:
        mpi_ops.synchronize(handle)


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer, root_rank: int, process_set: ProcessSet = global_process_set
) -> None:
    """Make every rank's optimizer state (hyper-parameters and buffers) root_rank's.

    An optimizer that has not stepped yet has no buffers to send: as Horovod
    does, every rank first takes one step with zero gradients to create them.
    """
    if not optimizer.state_dict()["state"]:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ValueError("broadcast_optimizer_state does not support LBFGS before its first step")
        plain_step = getattr(optimizer, "_hvd_plain_step", None)
        (plain_step or optimizer.step)()
    state = broadcast_object(optimizer.state_dict(), root_rank, process_set=process_set)
    if mpi_ops.rank() == root_rank:
        return
    optimizer.load_state_dict(state)
