"""Build libhvd_nccl.so alone for one variant, and inspect what came out.

Used by tests/nccl and benchmarks/wheel_size.py so both build the plugin the
way the real build does (the same build description, the same native/nccl
fragment) without building the core library.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.engine.variant import Variant
from selector_backend.install.cmake_config import describe, probe_compiler, write_description

ROOT = Path(__file__).resolve().parents[1]
STANDALONE = ROOT / "native" / "nccl" / "standalone"
INSTALLED_NAME = Path("hvd_selector") / "libhvd_nccl.so"


@dataclass(frozen=True)
class Built:
    """An installed plugin: ``prefix/hvd_selector/libhvd_nccl.so``."""

    prefix: Path
    library: Path
    configure_s: float
    build_s: float


def nvcc() -> str | None:
    """The nvcc CMake would find (CUDACXX, PATH, /usr/local/cuda), or None."""
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def nccl_wheel_dir() -> Path | None:
    """site-packages/nvidia/nccl of the nvidia-nccl-cu13 wheel, if installed."""
    try:
        import nvidia.nccl
    except ImportError:
        return None
    return Path(next(iter(nvidia.nccl.__path__)))


def cuobjdump() -> str | None:
    """cuobjdump from PATH, the toolkit, or the nvidia-cuda-cuobjdump wheel."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path("/usr/local/cuda/bin/cuobjdump")]
    candidates += [Path(p) / "nvidia" / "cu13" / "bin" / "cuobjdump" for p in sys.path if p]
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def build_description(variant: Variant, catalog: Catalog, out_dir: Path) -> Path:
    """The build description of ``variant`` (what cmake-config writes), in ``out_dir``."""
    return write_description(describe(variant, catalog, probe_compiler()), out_dir / "build_description.cmake")


def build(
    variant: Variant,
    work: Path,
    *,
    catalog: Catalog | None = None,
    jobs: int = 2,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    strip: bool = False,
) -> Built:
    """Configure, build and install the plugin under ``work``; raise on failure.

    ``strip`` installs as scikit-build-core does for a wheel (install.strip).
    A failed step raises CalledProcessError with CMake's output attached.
    """
    catalog = catalog or load_catalog()
    work.mkdir(parents=True, exist_ok=True)
    build_dir, prefix = work / "build", work / "prefix"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = [
        "cmake",
        "-S",
        str(STANDALONE),
        "-B",
        str(build_dir),
        *generator,
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DHVD_BUILD_DESCRIPTION={build_description(variant, catalog, work)}",
        f"-DPython_EXECUTABLE={sys.executable}",
        *extra_args,
    ]
    started = time.perf_counter()
    _run(configure, env)
    configured = time.perf_counter()
    _run(["cmake", "--build", str(build_dir), "-j", str(jobs)], env)
    _run(["cmake", "--install", str(build_dir), "--prefix", str(prefix), *(["--strip"] if strip else [])], env)
    built = time.perf_counter()
    return Built(prefix, prefix / INSTALLED_NAME, configured - started, built - configured)


def _run(cmd: list[str], env: dict[str, str] | None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)


def wheel_layout(built: Built) -> Path:
    """Make ``prefix`` look like site-packages: link ``nvidia/`` from the NCCL wheel.

    Then the plugin's RUNPATH ($ORIGIN/../nvidia/nccl/lib) resolves exactly as
    it does after ``pip install hvd-selector[gpu-nvidia]``.
    """
    wheel = nccl_wheel_dir()
    if wheel is None:
        raise RuntimeError("the nvidia-nccl-cu13 wheel is not installed: pip install nvidia-nccl-cu13")
    link = built.prefix / "nvidia"
    if not link.exists():
        link.symlink_to(wheel.parent, target_is_directory=True)
    return built.prefix


def cubins(library: Path) -> tuple[list[str], list[str]]:
    """(SASS archs, PTX archs) embedded in ``library``, e.g. (["80", "90"], ["90"])."""
    tool = cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    elf = subprocess.run([tool, "--list-elf", str(library)], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([tool, "--list-ptx", str(library)], capture_output=True, text=True, check=True).stdout
    sass = sorted(set(re.findall(r"\.sm_(\d+)[a-z]?\.cubin", elf)), key=int)
    virtual = sorted(set(re.findall(r"\.sm_(\d+)[a-z]?\.ptx", ptx)), key=int)
    return sass, virtual


def section_size(library: Path, name: str) -> int:
    """Size in bytes of ELF section ``name`` (0 when absent)."""
    out = subprocess.run(["readelf", "-S", "-W", str(library)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 5 and parts[1] == name:
            return int(parts[5], 16)
    return 0


def dynamic_info(library: Path) -> tuple[list[str], list[str]]:
    """(DT_NEEDED libraries, RUNPATH entries) of ``library``."""
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*?)\]", out)
    return needed, [p for entry in runpath for p in entry.split(":") if p]


def exported_symbols(library: Path) -> list[str]:
    """Names the library's dynamic symbol table defines (what dlsym can find)."""
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def kernels(library: Path) -> list[str]:
    """Demangled CUDA kernels in ``library``'s SASS, e.g. ``scale_kernel<float>``."""
    tool = cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    out = subprocess.run(
        [tool, "--dump-resource-usage", str(library)], capture_output=True, text=True, check=True
    ).stdout
    mangled = sorted({line.split("Function", 1)[1].strip(" :") for line in out.splitlines() if "Function" in line})
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True, check=True).stdout
    return sorted({re.sub(r"^.*::(\w+<[^>]*>)\(.*$", r"\1", line) for line in demangled.splitlines() if line})
