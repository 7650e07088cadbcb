"""Build each native variant at most once per source state (tests and benchmarks).

Builds live under build/test-variants/<name>-<hash>/ keyed by a hash of
everything that goes into the compiled core (CMakeLists.txt, native/, the
catalog and the selector modules CMake calls), so a second test session
reuses them. The Python files of hvd_selector are copied fresh every session
(they are not compiled). Workers get PYTHONPATH=<stage>:<repo>.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def _variant_config(defines: dict[str, str]) -> bytes:
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
    return (proc.stdout + proc.stderr).encode()


def source_hash(defines: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(_variant_config(defines))
    files = [REPO / p for p in HASHED]
    with_plugin = defines.get("HVD_TENSOR_OPS") == "nccl"  # only nccl builds compile native/nccl/
    files += sorted(
        p
        for p in (REPO / "native").rglob("*")
        if p.is_file() and (with_plugin or "nccl" not in p.relative_to(REPO / "native").parts)
    )
    for path in files:
        h.update(str(path.relative_to(REPO)).encode())
        h.update(path.read_bytes() if path.exists() else b"<missing>")
    for key in sorted(defines):
        h.update(f"{key}={defines[key]}".encode())
    return h.hexdigest()[:12]


def build_variant(name: str, defines: dict[str, str]) -> Build:
    """Configure, build and install one variant (or reuse it), then refresh the Python files."""
    VARIANTS_DIR.mkdir(parents=True, exist_ok=True)
    root = VARIANTS_DIR / f"{name}-{source_hash(defines)}"
    stage = root / "stage"
    with open(VARIANTS_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            shutil.rmtree(root, ignore_errors=True)
            args = [
                "cmake",
                "-S",
                str(REPO),
                "-B",
                str(root / "build"),
                "-G",
                "Ninja",
                f"-DPython_EXECUTABLE={sys.executable}",
            ] + [f"-D{k}={v}" for k, v in defines.items()]
            for cmd in (
                args,
                ["cmake", "--build", str(root / "build")],
                ["cmake", "--install", str(root / "build"), "--prefix", str(stage)],
            ):
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode:
                    raise RuntimeError(
                        f"building {name} failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                    )
            (root / "done").write_text("ok\n")
        for py in (REPO / "hvd_selector").rglob("*.py"):
            target = stage / "hvd_selector" / py.relative_to(REPO / "hvd_selector")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(py, target)
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
