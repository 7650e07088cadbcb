"""The compatibility rules (DESIGN.md **contract**), as small pure functions.

Each rule answers with Findings: ``ok`` says whether the binary can run on
the host, ``reason`` says why in words a user can act on. Every consumer
(resolver, import guard, Spack picker, planner) calls these; nothing else
decides compatibility.
"""

from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple

from selector_backend.engine import targets
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.variant import Variant
from selector_backend.engine.versions import at_least

Support = Literal["sass", "ptx"]


class Finding(NamedTuple):
    ok: bool
    reason: str


# ------------------------------------------------------------------ CPU
def check_target(binary_target: str, host: HostProfile) -> Finding:
    """Spack's rule: equal, or the binary's target is an archspec ancestor of the host's."""
    if host.cpu is None:
        if host.machine is None:
            return Finding(False, f"target {binary_target}: host profile has no cpu and no machine")
        ok = binary_target == host.machine
        return Finding(
            ok,
            f"target {binary_target}: host cpu unknown, only the generic {host.machine} target is assumed to run",
        )
    return Finding(*targets.cpu_verdict(binary_target, host.cpu.microarch))


# ------------------------------------------------------------------ CUDA
def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def _arch(arch: str) -> tuple[int, int]:
    return int(arch[:-1]), int(arch[-1])


def gpu_code(archs: Sequence[str], cc: str) -> tuple[Support, str] | None:
    """The one SASS/PTX rule: which image of a build for ``archs`` a GPU of ``cc`` runs.

    SASS sm_XY runs on the same major with minor >= Y (the closest such arch
    wins); PTX is emitted for the highest arch only and JIT-compiles on any GPU
    >= X.Y. SASS is preferred. None: nothing in the build runs on that GPU.
    """
    real = sorted((_arch(a), a) for a in archs if a != "none")
    if not real:
        return None
    gpu = _cc(cc)
    sass = [name for arch, name in real if arch[0] == gpu[0] and arch[1] <= gpu[1]]
    if sass:
        return "sass", sass[-1]
    if real[-1][0] <= gpu:
        return "ptx", real[-1][1]
    return None


def cuda_arch_support(archs: Sequence[str], cc: str) -> Support | None:
    """How a build for ``archs`` runs on a GPU of compute capability ``cc`` (gpu_code's kind)."""
    code = gpu_code(archs, cc)
    return None if code is None else code[0]


def check_cuda(archs: Sequence[str], toolkit: str | None, host: HostProfile) -> list[Finding]:
    """A CUDA build must serve every NVIDIA GPU, and the driver must support its CUDA."""
    archs = [a for a in archs if a != "none"]
    if not archs:
        return []
    gpus = host.nvidia_gpus()
    listed = ",".join(archs)
    if not gpus:
        return [
            Finding(
                False,
                f"cuda_arch {listed} needs an NVIDIA GPU; none detected "
                "(for a GPU-less build machine set HVD_SELECTOR_GPUS, e.g. 8.0)",
            )
        ]
    findings = []
    for cc in sorted({g.compute_capability for g in gpus}, key=_cc):
        names = sorted({g.name for g in gpus if g.compute_capability == cc})
        label = f"GPU {cc} ({', '.join(names)})"
        support = cuda_arch_support(archs, cc)
        sm = f"sm_{cc.replace('.', '')}"
        if support == "sass":
            findings.append(Finding(True, f"cuda_arch {listed} has SASS for {label}"))
        elif support == "ptx":
            highest = max(archs, key=_arch)
            findings.append(
                Finding(
                    True,
                    f"cuda_arch {listed} has no SASS for {sm}; runs on {label} through PTX JIT of compute_{highest}",
                )
            )
        else:
            findings.append(
                Finding(
                    False,
                    f"cuda_arch {listed} cannot run on {label}: no SASS for the "
                    f"{cc.split('.')[0]}.x family and PTX needs a newer GPU",
                )
            )
    ptx_only = [cc for cc in {g.compute_capability for g in gpus} if cuda_arch_support(archs, cc) == "ptx"]
    findings.append(check_driver(toolkit, host.cuda_driver, sorted(ptx_only, key=_cc)))
    return findings


#: The oldest Linux driver of each CUDA major line (NVIDIA's CUDA Compatibility guide,
#: "minor version compatibility": 12.x runs on >= 525.60.13, 13.x on >= 580).
MINOR_COMPAT_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def check_driver(toolkit: str | None, driver: str | None, ptx_only: Sequence[str] = ()) -> Finding:
    """CUDA minor-version compatibility: toolkit M.n runs on a driver supporting M.0 or newer.

    ``driver`` is the highest CUDA version the driver supports. A newer major
    always runs an older one. The exception is PTX: a GPU served only through
    PTX JIT (``ptx_only`` lists their compute capabilities) needs a driver
    whose CUDA version is >= the toolkit's M.n, since the JIT is the driver's.
    """
    if toolkit is None:
        return Finding(True, "CUDA version of the binary not recorded; driver check skipped")
    if driver is None:
        return Finding(
            False,
            f"built with CUDA {toolkit}, needs a driver supporting CUDA {_major(toolkit)}.0 or newer; "
            "driver version unknown",
        )
    if ptx_only and not at_least(driver, toolkit):
        gpus = ", ".join(ptx_only)
        return Finding(
            False,
            f"GPU {gpus} runs this build only through PTX JIT, which needs a driver supporting CUDA "
            f"{toolkit} (the build's toolkit); the driver supports only CUDA {driver}",
        )
    if _major(driver) < _major(toolkit):
        oldest = MINOR_COMPAT_DRIVER.get(_major(toolkit))
        needs = f" (driver >= {oldest})" if oldest else ""
        return Finding(
            False,
            f"built with CUDA {toolkit}: needs a driver supporting CUDA {_major(toolkit)}.0 or newer{needs}; "
            f"the driver supports only CUDA {driver}",
        )
    if at_least(driver, toolkit):
        return Finding(True, f"driver supports CUDA {driver} >= {toolkit}")
    return Finding(True, f"driver supports CUDA {driver}: runs CUDA {toolkit} builds by minor-version compatibility")


def _major(version: str) -> int:
    return int(version.split(".")[0])


def worst_cuda_support(archs: Sequence[str], host: HostProfile) -> Support | None:
    """The weakest support over all GPUs (the minimum, as conda's __cuda_arch)."""
    supports = [cuda_arch_support(archs, g.compute_capability) for g in host.nvidia_gpus()]
    if not supports or None in supports:
        return None
    return "ptx" if "ptx" in supports else "sass"


def cuda_code_used(archs: Sequence[str], host: HostProfile) -> tuple[int, ...]:
    """For each GPU, the arch whose code it runs (SASS if any, else the PTX), weakest first.

    Higher is closer to the GPU: an 8.6 GPU runs sm_86 natively but sm_80 only as a
    compatible older image, and a 10.0 GPU JIT-compiles compute_90 PTX into better code
    than compute_70. Ranking uses this after SASS-vs-PTX so the catalog's exact builds win.
    """
    codes = [gpu_code(archs, gpu.compute_capability) for gpu in host.nvidia_gpus()]
    return tuple(sorted(int(code[1]) for code in codes if code is not None))


# ------------------------------------------------------------------ libraries, os
def has_capability(capability: str, host: HostProfile, mpi_abi: str | None = None) -> Finding:
    """Does the host provide ``capability``? ``mpi_abi`` narrows "mpi" to one ABI family."""
    if capability == "nvidia_gpu":
        if host.nvidia_gpus():
            return Finding(True, f"NVIDIA GPU present ({host.describe_nvidia_gpus()})")
        return Finding(False, "no NVIDIA GPU detected")
    if capability == "mpi":
        mpi = host.library("mpi")
        if mpi is not None and mpi_abi is not None:
            from selector_backend.engine.catalog import MPI_ABI_FAMILIES

            family = MPI_ABI_FAMILIES[mpi_abi]
            if mpi.implementation not in family:
                return Finding(
                    False,
                    f"prebuilt MPI builds use the {mpi_abi} ABI ({', '.join(family)}); "
                    f"host MPI is {mpi.describe()} (a source build uses it)",
                )
        if mpi is not None:
            return Finding(True, f"MPI runtime present: {mpi.describe()}")
        return Finding(
            False,
            "no MPI runtime found (install one, e.g. pip install hvd-selector[mpi] or apt install mpich)",
        )
    return Finding(False, f"unknown capability {capability}")


def check_requirements(variant: Variant, catalog: Catalog, host: HostProfile, prebuilt: bool = True) -> list[Finding]:
    """Host capabilities the variant needs; a prebuilt binary also needs its ABI (catalog [builds])."""
    findings = []
    for axis, value, cap in catalog.requirements_of(variant):
        have = has_capability(cap, host, catalog.mpi_abi if prebuilt else None)
        findings.append(Finding(have.ok, f"{axis}={value} needs {cap.replace('_', ' ')}: {have.reason}"))
    return findings


def check_os(spec_os: str, host: HostProfile, relax: bool = False) -> Finding:
    """Spack's rule: a binary's os must equal the host's, unless relaxed."""
    if host.os == spec_os:
        return Finding(True, f"os {spec_os} matches the host")
    if relax:
        return Finding(True, f"os {spec_os} differs from host {host.os or 'unknown'} (allowed by --any-os)")
    return Finding(False, f"os {spec_os} is not the host's {host.os or '(unknown)'}")


# ------------------------------------------------------------------ all together
def check_variant(
    variant: Variant, catalog: Catalog, host: HostProfile, memo: dict[Any, tuple[Finding, ...]] | None = None
) -> list[Finding]:
    """Every rule for a catalog variant: target, CUDA, host requirements.

    Each rule's answer depends on one part of the variant (its target, its
    CUDA line and arch list, one axis value's requirements), so a caller
    checking many variants against one host and catalog may pass a ``memo``
    dict to share those answers: an index of thousands of variants has only
    a few dozen distinct parts.
    """
    if memo is None:
        memo = {}
    key: tuple[Any, ...] = ("target", variant["target"])
    part = memo.get(key)
    if part is None:
        part = memo[key] = (check_target(str(variant["target"]), host),)
    findings = list(part)
    cuda = variant.get("cuda", "none")
    key = ("cuda", cuda, variant.get("cuda_arch"))
    part = memo.get(key) if "cuda" in variant else ()  # a catalog without GPU axes: no GPU rule
    if part is None:
        toolkit = catalog.cuda_lines[str(cuda)].toolkit if cuda in catalog.cuda_lines else None
        part = memo[key] = tuple(check_cuda(variant.values_of("cuda_arch"), toolkit, host))
    findings += part
    for axis, value in variant.pairs():
        key = ("requires", axis, value)
        part = memo.get(key)
        if part is None:
            part = memo[key] = tuple(check_requirements(Variant({axis: value}), catalog, host))
        findings += part
    return findings


def compatible(findings: Sequence[Finding]) -> bool:
    return all(f.ok for f in findings)


def failures(findings: Sequence[Finding]) -> Iterator[str]:
    return (f.reason for f in findings if not f.ok)
