"""The installed runtime's one question to the engine: does this build run on this machine?

``hvd_selector``'s import guard asks it before loading native code (the CPU)
and again before the first GPU operation (the GPU), so the runtime applies
exactly the resolver's rules without importing the rest of the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class RuntimeVerdict(NamedTuple):
    runs: bool
    why: str
    gpu_code: str | None  # 'sass' or 'ptx' when a GPU was checked and is served


def runtime_verdict(
    build_target: str | None = None,
    host_cpu: str | None = None,
    cuda_archs: Sequence[str] = (),
    compute_capability: str | None = None,
) -> RuntimeVerdict:
    """Check the CPU (given ``build_target`` and ``host_cpu``) and/or the GPU (given ``compute_capability``)."""
    if build_target is not None and host_cpu is not None:
        from selector_backend.engine.targets import cpu_verdict

        ok, why = cpu_verdict(build_target, host_cpu)
        if not ok:
            return RuntimeVerdict(False, why, None)
    if compute_capability is None:
        return RuntimeVerdict(True, "", None)
    from selector_backend.engine.compat import cuda_arch_support

    support = cuda_arch_support(list(cuda_archs), compute_capability)
    if support is None:
        listed = ",".join(cuda_archs) or "none"
        return RuntimeVerdict(False, f"cuda_arch={listed} cannot run on compute capability {compute_capability}", None)
    return RuntimeVerdict(True, "", str(support))
