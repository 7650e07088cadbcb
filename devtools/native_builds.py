"""Build each native variant at most once per source state (tests and benchmarks).

Builds live under build/test-variants/<name>-<hash>/ keyed by a hash of
everything that goes into the compiled core (CMakeLists.txt, native/, the
catalog and the selector modules CMake calls), so a second test session
reuses them (devtools.build_cache: one build under a file lock, also across
pytest-xdist workers). The Python files of hvd_selector are refreshed every
session (they are not compiled; a file is replaced atomically, only if it changed).
Workers get PYTHONPATH=<stage>:<repo>.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from devtools.build_cache import build_once, files_hash, refresh_file

REPO = Path(__file__).resolve().parents[1]
VARIANTS_DIR = REPO / "build" / "test-variants"
HASHED = ["CMakeLists.txt"]


@dataclass(frozen=True)
class Build:
    name: str
    stage: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.stage), str(REPO)])
        env.setdefault("HVD_SELECTOR_TIMEOUT", "20")
        env.pop("HVD_SELECTOR_TARGET", None)
        env.update(extra)
        return env


def _variant_config(defines: dict[str, str]) -> str:
    """The build description cmake-config writes for these defines (flags,
    variant.json ...): the selector's part of the build, hashed by its output so
    unrelated edits in selector_backend/ do not trigger rebuilds."""
    assignments = [f"{k}={v}" for k, v in defines.items() if k.startswith("HVD_")]
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "cmake-config", *assignments],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return proc.stdout + proc.stderr


def source_hash(defines: dict[str, str]) -> str:
    files = [REPO / p for p in HASHED]
    with_plugin = defines.get("HVD_TENSOR_OPS") == "nccl"  # only nccl builds compile native/nccl/
    files += sorted(
        p
        for p in (REPO / "native").rglob("*")
        if p.is_file() and (with_plugin or "nccl" not in p.relative_to(REPO / "native").parts)
    )
    return files_hash(files, _variant_config(defines), *(f"{key}={defines[key]}" for key in sorted(defines)))


def compilers_as_scikit_build_core_picks() -> dict[str, str]:
    """CC and CXX as scikit-build-core sets them for the wheels (Python's own, from sysconfig, unless set):
    ccache keys on the compiler's name, so with the same names (g++, not CMake's c++) these builds and
    the release builder's wheels of the same variant share one cache entry per file."""
    found = {name: str(sysconfig.get_config_var(name) or "").split(" ")[0] for name in ("CC", "CXX")}
    return {name: os.environ.get(name) or compiler for name, compiler in found.items() if compiler}


def cmake_dir(root: Path) -> Path:
    """CMake's build directory of the variant built under ``root``: build/test-variants/<name>/build,
    as deep below the tree as a wheel's (selector_backend.install.build.WHEEL_BUILDS), for ccache."""
    return root / "build"


def _cmake_build(root: Path, defines: dict[str, str]) -> None:
    """Configure, build and install one variant into ``root``/stage."""
    build = str(cmake_dir(root))
    args = ["cmake", "-S", str(REPO), "-B", build, "-G", "Ninja", f"-DPython_EXECUTABLE={sys.executable}"]
    env = dict(os.environ, **compilers_as_scikit_build_core_picks())
    for cmd in (
        args + [f"-D{k}={v}" for k, v in defines.items()],
        ["cmake", "--build", build],
        ["cmake", "--install", build, "--prefix", str(root / "stage")],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise RuntimeError(
                f"building {root.name} failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )


def build_variant(name: str, defines: dict[str, str]) -> Build:
    """Configure, build and install one variant (or reuse it), then refresh the Python files."""
    root = build_once(VARIANTS_DIR / f"{name}-{source_hash(defines)}", lambda root: _cmake_build(root, defines))
    stage = root / "stage"
    for py in (REPO / "hvd_selector").rglob("*.py"):
        refresh_file(py, stage / "hvd_selector" / py.relative_to(REPO / "hvd_selector"))
    return Build(name, stage)


GLOO = {"HVD_TARGET": "x86_64_v3", "HVD_TENSOR_OPS": "gloo", "HVD_CONTROLLERS": "gloo"}
# The GPU variant the tests build without a GPU (needs nvcc 13 and nvidia-nccl-cu13).
NCCL = {
    "HVD_TARGET": "x86_64_v3",
    "HVD_CUDA": "13",
    "HVD_CUDA_ARCH": "80",
    "HVD_TENSOR_OPS": "nccl",
    "HVD_CONTROLLERS": "gloo",
}


def mpi_defines(impl: str) -> dict[str, str]:
    return {
        "HVD_TARGET": "x86_64_v3",
        "HVD_TENSOR_OPS": "mpi",
        "HVD_CONTROLLERS": "mpi",
        "MPI_C_COMPILER": f"/usr/bin/mpicc.{impl}",
    }


def benchmark_builds() -> dict[str, Build]:
    """The two builds the allreduce and fusion benchmarks compare (same variants in both)."""
    return {
        "gloo": build_variant("gloo-x86_64_v3", GLOO),
        "mpi": build_variant("mpi-openmpi-x86_64_v3", mpi_defines("openmpi")),
    }


def run_argv(np_: int, script: Path, *args: str) -> list[str]:
    """``hvd-selector run -np N python <script> args...`` as an argv (tests and benchmarks)."""
    return [sys.executable, "-m", "selector_backend", "run", "-np", str(np_), sys.executable, str(script), *args]


def python(build: Build, code: str, cwd: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in the build's environment (output captured)."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=build.env(**env), capture_output=True, text=True, timeout=timeout
    )
