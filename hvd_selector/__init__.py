"""hvd_selector: Horovod-style collectives in the build that fits this machine.

Importing checks the installed build against this CPU *before* any native
code is loaded (an x86_64_v4 build on a CPU without AVX-512 raises
ImportError naming the missing features and the reinstall command instead
of crashing with SIGILL), then loads the native core.
"""

from __future__ import annotations

from typing import Any

from selector_backend.jobs.build_facts import load_facts

from . import _guard

try:
    _FACTS = load_facts()
except ImportError as exc:
    raise ImportError(f"{exc}; reinstall it: {_guard.reinstall_command()}") from None
_guard.check_cpu(_FACTS)

from selector_backend.jobs.rendezvous import RendezvousError  # noqa: E402

from . import _api  # noqa: E402  (loads the native core, after the guard)
from ._api import (  # noqa: E402
    Average,
    CollectiveTimeoutError,
    HorovodInternalError,
    Max,
    Min,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
    Product,
    Sum,
    UnavailableError,
    allgather,
    allreduce,
    allreduce_,
    alltoall,
    barrier,
    broadcast,
    fusion_threshold,
    grouped_allreduce,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    set_fusion_threshold,
    shutdown,
    size,
)
from .buildmix import IncompatibleBuildsError  # noqa: E402

_api._set_facts(_FACTS)

__all__ = [
    "Average",
    "CollectiveTimeoutError",
    "HorovodInternalError",
    "IncompatibleBuildsError",
    "Max",
    "Min",
    "MismatchError",
    "NotInitializedError",
    "PeerFailureError",
    "Product",
    "RendezvousError",
    "Sum",
    "UnavailableError",
    "allgather",
    "allreduce",
    "allreduce_",
    "alltoall",
    "barrier",
    "broadcast",
    "build_info",
    "fusion_threshold",
    "grouped_allreduce",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "set_fusion_threshold",
    "shutdown",
    "size",
]


def build_info() -> dict[str, Any]:
    """Variant, target and flags, tensor_ops, controllers, CUDA archs, library versions."""
    from ._build_info import collect

    return collect(_FACTS)
