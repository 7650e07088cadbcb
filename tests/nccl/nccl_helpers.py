"""What the nccl tests share: the variant they build the plugin for, why the
plugin cannot be built here (then the tests skip), and the stand-in plugin
(tests/nccl/standin/: the plugin ABI over host memory) that puts the core's
whole GPU path under test without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from devtools import hvd_nccl_build
from devtools.native_builds import Build

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "standin" / "standin_plugin.cpp"

# The catalog's CUDA 13 GPU target with two archs: enough to check SASS for
# each and PTX for the highest, and small enough to compile in seconds.
TEST_VARIANT = "target=x86_64_v3 cuda=13 cuda_arch=80,90 tensor_ops=nccl controllers=gloo frameworks=pytorch"


def toolchain_missing() -> str | None:
    """Why the plugin cannot be built here, or None."""
    if hvd_nccl_build.nvcc() is None:
        return "nvcc (CUDA 13 toolkit) not found"
    if hvd_nccl_build.nccl_wheel_dir() is None:
        return "nvidia-nccl-cu13 is not installed (pip install nvidia-nccl-cu13)"
    return None


def build_standin(out_dir: Path) -> Path:
    """Compile the stand-in plugin to out_dir/libhvd_nccl.so (with the core's CPU kernels)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / "libhvd_nccl.so"
    native = ROOT / "native"
    cmd = [
        shutil.which("g++") or "c++",
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        f"-I{native / 'include'}",
        f"-I{native / 'src'}",
        f"-I{native / 'nccl'}",
        str(STANDIN),
        str(native / "src" / "kernels_cpu.cpp"),
        str(native / "src" / "common.cpp"),
        "-o",
        str(library),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return library


def with_standin(build: Build, plugin: Path, dest: Path) -> Build:
    """A copy of the nccl variant `build` whose libhvd_nccl.so is the stand-in:
    the core finds it where it finds the real plugin, next to _core."""
    shutil.copytree(build.stage, dest, symlinks=True)
    shutil.copy2(plugin, dest / "hvd_selector" / "libhvd_nccl.so")
    return Build(f"{build.name}-standin", dest)
