"""Import-time hardware guard: runs before any native code is loaded.

An x86_64_v4 build on a CPU without AVX-512 would die with SIGILL somewhere
inside a kernel; instead the import fails with the missing features and the
command that installs the right build. GPU builds are checked lazily (on the
first GPU operation) against the device's compute capability.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._facts import BuildFacts

REINSTALL = "pip install --no-cache-dir --force-reinstall hvd-selector"
TARGET_ENV = "HVD_SELECTOR_TARGET"


def _host_cpu() -> tuple[str, str, frozenset[str]]:
    """(microarch name, family, features) of this host, or the pretend one."""
    from selector_backend import targets

    pretend = os.environ.get(TARGET_ENV, "").strip()
    if pretend:
        if not targets.known_target(pretend):
            from selector_backend.errors import did_you_mean

            raise ImportError(
                f"hvd_selector: {TARGET_ENV}={pretend!r} is not an archspec target"
                f"{did_you_mean(pretend, targets._targets())}; unset it or name a real one"
            )
        return pretend, targets.family(pretend), targets.features(pretend)
    import archspec.cpu

    host = archspec.cpu.host()
    return str(host.name), str(host.family.name), frozenset(host.features)


def check_cpu(facts: BuildFacts) -> None:
    """ImportError unless this CPU runs the build's target."""
    from selector_backend import targets

    target = facts.target
    host_name, host_family, host_features = _host_cpu()
    if not targets.known_target(target):
        raise ImportError(f"hvd_selector: this build targets unknown CPU {target!r}; reinstall: {REINSTALL}")
    if targets.family(target) != host_family:
        raise ImportError(
            f"hvd_selector: this build is for {targets.family(target)} ({target}) but this "
            f"machine is {host_family} ({host_name}); reinstall the build for this machine: "
            f"{REINSTALL}"
        )
    missing = targets.missing_features(target, host_features)
    if missing:
        raise ImportError(
            f"hvd_selector: this build targets {target} but this CPU ({host_name}) lacks "
            f"{', '.join(missing)}; reinstall the build for this machine: {REINSTALL}"
        )


def check_gpu(archs: Sequence[str], compute_capability: str) -> str:
    """'sass' or 'ptx' if the build serves a GPU of this capability, else RuntimeError."""
    from selector_backend.compat import cuda_arch_support

    support = cuda_arch_support(list(archs), compute_capability)
    if support is None:
        raise RuntimeError(
            f"GPU operations unavailable: this build has code for cuda_arch={','.join(archs) or 'none'} "
            f"which cannot run on a GPU of compute capability {compute_capability}; reinstall the build "
            f"for this machine: {REINSTALL}[gpu-nvidia]"
        )
    return str(support)
