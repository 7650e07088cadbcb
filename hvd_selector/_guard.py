"""Import-time hardware guard: runs before any native code is loaded.

An x86_64_v4 build on a CPU without AVX-512 would die with SIGILL somewhere
inside a kernel; instead the import fails with the missing features and the
command that installs the right build. GPU builds are checked lazily (on the
first GPU operation) against the device's compute capability.
"""

from __future__ import annotations

from collections.abc import Sequence

from selector_backend.jobs.build_facts import BuildFacts


def reinstall_command(settings: tuple[str, ...] = ()) -> str:
    """The command that installs the build for this machine into this environment, as printed
    (``settings``: extra ``-C KEY=VALUE``s, e.g. ``selector=gpu-nvidia``)."""
    import sys

    from selector_backend.engine.reinstall import installed, reinstall_command

    return reinstall_command(installed(), sys.executable, settings)


def _cpuid_features() -> frozenset[str]:
    """Features from the cpuid instruction (archspec's reader), /proc/cpuinfo for names cpuid lacks.

    /proc/cpuinfo describes the kernel's CPU, which is not the CPU this process
    runs on under an emulator or a CPU-masking hypervisor; cpuid is. Names
    archspec's cpuid table does not cover (zen's clzero ...) come from /proc.
    """
    from archspec.cpu import detect
    from archspec.cpu.schema import CPUID_JSON

    cpuid = detect.CpuidInfoCollector()
    known = {b["name"] for group in ("flags", "extension-flags") for call in CPUID_JSON[group] for b in call["bits"]}
    try:
        proc = set(detect.proc_cpuinfo().features)
    except Exception:  # no /proc: cpuid alone
        proc = set()
    return frozenset(set(cpuid.features) | (proc - known - {"sse3"}))  # cpuid says sse3 as pni


def real_cpu() -> str:
    """The archspec microarchitecture of the CPU this process really runs on.

    Never an override: HVD_SELECTOR_TARGET and host profiles steer which build
    is chosen, but the safety check reads the hardware (an ``ENV`` left in a
    Docker image must not turn it off). On x86_64 Linux the features come from
    cpuid; elsewhere archspec's own detection already reads the hardware.
    """
    import platform

    from archspec.cpu import detect

    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        import archspec.cpu

        return str(archspec.cpu.host().name)
    cpuid = detect.CpuidInfoCollector()
    info = detect.partial_uarch(vendor=cpuid.vendor, features=set(_cpuid_features()))
    original = detect.detected_info
    detect.detected_info = lambda: info  # archspec's own pick among compatible targets
    try:
        return str(detect.host.__wrapped__().name)
    finally:
        detect.detected_info = original


def check_cpu(facts: BuildFacts, host_target: str | None = None) -> None:
    """ImportError unless this CPU runs the build's target (the resolver's own rule)."""
    from selector_backend.engine.runtime import runtime_verdict

    host = host_target or real_cpu()
    runs, why, _ = runtime_verdict(facts.target, host)
    if not runs:
        raise ImportError(
            f"hvd_selector: this build targets {facts.target} but this CPU is {host}: {why}; "
            f"reinstall the build for this machine: {reinstall_command()} (skipping the cache matters: pip keys "
            "its wheel cache by the sdist alone and would hand back this same build)"
        )


def check_gpu(archs: Sequence[str], compute_capability: str) -> str:
    """'sass' or 'ptx' if the build serves a GPU of this capability, else RuntimeError."""
    from selector_backend.engine.runtime import runtime_verdict

    runs, _, support = runtime_verdict(cuda_archs=archs, compute_capability=compute_capability)
    if not runs:
        raise RuntimeError(
            f"GPU operations unavailable: this build has code for cuda_arch={','.join(archs) or 'none'} "
            f"which cannot run on a GPU of compute capability {compute_capability}; reinstall the build "
            f"for this machine: {reinstall_command()}"
        )
    return str(support)
