"""Every user-supplied field of a collective, checked on the calling rank.

Why at the call: what a rank submits is announced to every other rank, and a
field the negotiation cannot carry (a name that is not a string, a scale
that is not a number) would reach them as a malformed message. Horovod
raises at the call; so does this: a TypeError or ValueError on the rank that
made the mistake, and the job goes on.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from .. import _api

Adasum = 5  # Horovod's value; not implemented here

# The torch dtypes the native core reduces, gathers and broadcasts (CPU and GPU paths).
DTYPES = frozenset(
    {
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.bool,
    }
)


def name(value: Any, what: str) -> str | None:
    """A collective's name: a str, or None for one named after its handle."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{what}: name must be a str or None, got {type(value).__name__} {value!r}")


def scale(value: Any, what: str, field: str) -> float:
    """prescale_factor / postscale_factor: a finite real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: {field} must be a number, got {type(value).__name__} {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{what}: {field} must be finite, got {result!r}")
    return result


def integer(value: Any, what: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what}: {field} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def root(value: Any, what: str) -> int:
    """A broadcast's root: a global rank of this job."""
    rank = integer(value, what, "root_rank")
    size = _api.size()
    if not 0 <= rank < size:
        raise ValueError(f"{what}: root_rank {rank} is not a rank of this job (0..{size - 1})")
    return rank


def op(average: Any, value: Any, what: str = "allreduce") -> int:
    """Horovod's rule for the deprecated ``average=`` next to ``op=``."""
    if value is not None and average is not None:
        raise ValueError(f"{what}: average= and op= cannot both be given (average= is deprecated; use op=)")
    if value is None:
        value = _api.Average if average is None or average else _api.Sum
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what}: op must be one of hvd.Sum, Average, Min, Max, Product, got {value!r}")
    if value == Adasum:
        raise NotImplementedError(f"{what}: Adasum is not supported by hvd_selector.torch; use op=hvd.Average")
    return _api._check_op(int(value))


def tensor(value: Any, what: str) -> torch.Tensor:
    """A dense tensor of a dtype the core takes, detached (GPU tensors: the build's GPU check runs)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(value).__name__}")
    if value.is_sparse:
        raise ValueError(f"{what}: sparse tensors are reduced with sparse_allreduce_async")
    if value.dtype not in DTYPES:
        known = ", ".join(sorted(str(d).removeprefix("torch.") for d in DTYPES))
        raise TypeError(f"{what}: unsupported dtype {str(value.dtype).removeprefix('torch.')}; supported: {known}")
    _api._gpu_guard(value)
    return value.detach()


def contiguous(value: torch.Tensor, what: str) -> torch.Tensor:
    if not value.is_contiguous():
        raise ValueError(f"{what}: tensor is required to be contiguous (call .contiguous())")
    return value
