"""CUDA tensors of a process set travel through host memory.

Why: the NCCL plugin holds one communicator, the global set's. A collective of
CUDA tensors on any other process set therefore runs on host copies over the
set's CPU communicator, and its results are copied back to the tensors' GPU,
as Horovod runs GPU tensors it has no GPU operation for. Only builds with GPU
operations stage: on a CPU build a CUDA tensor stays the error that names the
GPU build.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .. import _api


def needed(set_id: int, tensors: Sequence[torch.Tensor]) -> bool:
    """Whether a collective of `tensors` on set `set_id` runs on host copies (the global set: at once, no)."""
    if set_id == 0:
        return False
    facts = _api._facts
    return facts is not None and facts.tensor_ops == "nccl" and any(t.is_cuda for t in tensors)


def run_on_host(
    call: Callable[[list[torch.Tensor], list[torch.Tensor]], None],
    ins: Sequence[torch.Tensor],
    outs: Sequence[torch.Tensor],
) -> None:
    """``call(ins, outs)`` on host copies; then each output gets its result (an in-place pair stays one buffer)."""
    host_ins = [t.cpu() for t in ins]
    copy_of = {id(t): h for t, h in zip(ins, host_ins, strict=True)}
    host_outs = [copy_of[id(t)] if id(t) in copy_of else torch.empty(t.shape, dtype=t.dtype) for t in outs]
    call(host_ins, host_outs)
    for t, h in zip(outs, host_outs, strict=True):
        t.copy_(h)
