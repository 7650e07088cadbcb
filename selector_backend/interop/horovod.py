"""HOROVOD_* build settings for upstream Horovod, from the same rules as our builds.

``pip install horovod`` compiles from source and reads its options from the
environment (docs/install.rst in Horovod). The variant an exact source build
of this library would target (the Selection's source build) says what Horovod
should build too: NCCL for the GPUs' compute capabilities, MPI or Gloo for
CPU tensors, which controllers. CPU flags come from archspec for the host
profile's microarchitecture, never from the build machine's ``-march=native``
(the two differ in Docker builds and on login nodes).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector_backend.engine import targets
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.select import Selection
from selector_backend.engine.variant import Variant
from selector_backend.errors import ExternalError, InputError

#: Frameworks Horovod can build against; ours are a subset (the catalog's frameworks axis).
HOROVOD_FRAMEWORKS = ("tensorflow", "pytorch", "mxnet")


@dataclass(frozen=True)
class HorovodEnv:
    env: dict[str, str]
    variant: Variant
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"env": dict(self.env), "variant": self.variant.to_json(), "notes": list(self.notes)}

    def shell(self) -> str:
        """``export K=V`` lines, quoted for POSIX shells."""
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())


def parse_compiler(text: str) -> tuple[str, str]:
    """'gcc@12.2.0' -> ('gcc', '12.2.0'); archspec compiler names."""
    name, sep, version = text.partition("@")
    if not sep or not name or not version:
        raise InputError(f"--compiler {text!r}: expected NAME@VERSION, e.g. gcc@12.2.0 or clang@17.0.6")
    return name, version.lstrip("=")


def detect_compiler(command: str = "gcc") -> tuple[str, str]:
    """The version of this machine's ``gcc`` (Horovod's build uses the default C++ compiler)."""
    try:
        out = subprocess.run([command, "-dumpfullversion"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ExternalError(f"cannot run {command} -dumpfullversion ({exc}); pass --compiler NAME@VERSION") from None
    return "gcc", out.stdout.strip()


def arch_flags(target: str, compiler: tuple[str, str]) -> tuple[str, str, list[str]]:
    """archspec flags for ``target``, else for its most specific ancestor the compiler knows.

    Returns (target used, flags, notes).
    """
    micro = targets.microarchitecture(target)
    chain = [target] + [a.name for a in sorted(micro.ancestors, key=lambda a: -len(a.ancestors))]
    notes = []
    for name in chain:
        try:
            flags = targets.optimization_flags(name, *compiler)
        except InputError as exc:
            notes.append(f"{exc}; trying an older target")
            continue
        if name != target:
            notes.append(f"{compiler[0]}@{compiler[1]} cannot compile for {target}; using its ancestor {name}")
        return name, flags, notes
    raise InputError(f"{compiler[0]}@{compiler[1]} knows no flags for {target} or any ancestor; pass --compiler")


def nccl_home(host: HostProfile, search: Sequence[Path] = ()) -> tuple[Path | None, str]:
    """Where a pip NCCL wheel (nvidia/nccl/{include,lib}) is, from the profile or ``search`` dirs."""
    info = host.library("nccl")
    if info is not None and info.location:
        path = Path(info.location)
        for candidate in (path, *path.parents):
            if candidate.name == "nccl" and candidate.parent.name == "nvidia":
                return candidate, f"NCCL {info.version or ''} from the pip wheel at {candidate}".replace("  ", " ")
        return None, f"NCCL at {info.location} is not a pip wheel; Horovod finds a system NCCL itself"
    for directory in search:
        candidate = Path(directory) / "nvidia" / "nccl"
        if (candidate / "include" / "nccl.h").is_file():
            return candidate, f"NCCL from the pip wheel at {candidate}"
    return None, "no pip NCCL wheel found; Horovod looks for a system NCCL (set HOROVOD_NCCL_HOME if elsewhere)"


def horovod_env(
    selection: Selection,
    catalog: Catalog,
    compiler: tuple[str, str],
    *,
    nccl_search: Sequence[Path] = (),
) -> HorovodEnv:
    """The environment for ``pip install --no-cache-dir horovod`` on the selection's host, building
    what a source build of this library would there (``Selection.require_source_build``)."""
    host, variant = selection.host, selection.require_source_build()
    notes: list[str] = []
    env: dict[str, str] = {}
    controllers = set(variant.values_of("controllers"))
    gpu = variant["cuda"] != "none"
    if gpu:
        env["HOROVOD_GPU"] = "CUDA"
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
        env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(variant.values_of("cuda_arch"))
        cpu_ops = "mpi" if "mpi" in controllers else "gloo"
        notes.append(
            f"CUDA {variant['cuda']} ({catalog.cuda_lines[str(variant['cuda'])].toolkit}+) "
            f"toolkit for cuda_arch {env['HOROVOD_BUILD_CUDA_CC_LIST']}: the newest line the "
            f"driver ({host.cuda_driver}) supports"
        )
    else:
        cpu_ops = str(variant["tensor_ops"])
    env["HOROVOD_CPU_OPERATIONS"] = cpu_ops.upper()
    # Horovod needs the library of its CPU operations built in, as Spack's py-horovod sets it
    controllers.add(cpu_ops)
    for lib in ("mpi", "gloo"):
        env[f"HOROVOD_WITH{'' if lib in controllers else 'OUT'}_{lib.upper()}"] = "1"
    frameworks = set(variant.values_of("frameworks"))
    for fw in HOROVOD_FRAMEWORKS:
        env[f"HOROVOD_WITH{'' if fw in frameworks else 'OUT'}_{fw.upper()}"] = "1"
    if host.cpu is None:
        raise InputError("the host profile has no cpu, so no -march flags can be chosen; add cpu.microarch")
    # a requested variant or a pinned target says which CPU to build for; else this host's own
    pinned = variant["target"] if selection.requested is not None else selection.selector.pins.get("target")
    target = str(pinned or host.cpu.microarch)
    used, flags, arch_notes = arch_flags(target, compiler)
    notes += arch_notes
    env["HOROVOD_BUILD_ARCH_FLAGS"] = flags
    notes.append(f"arch flags for {used} with {compiler[0]}@{compiler[1]} from archspec (not -march=native)")
    if gpu:
        home, why = nccl_home(host, nccl_search)
        notes.append(why)
        if home is not None:
            env["HOROVOD_NCCL_HOME"] = str(home)
            env["HOROVOD_NCCL_INCLUDE"] = str(home / "include")
            env["HOROVOD_NCCL_LIB"] = str(home / "lib")
            env["HOROVOD_NCCL_LINK"] = "SHARED"
            if not (home / "lib" / "libnccl.so").exists():
                notes.append(
                    f"the wheel ships only libnccl.so.2; Horovod's CMake links -lnccl, so run: "
                    f"ln -s libnccl.so.2 {home / 'lib' / 'libnccl.so'}"
                )
    return HorovodEnv(env, variant, tuple(notes))
