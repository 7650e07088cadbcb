"""What the nccl tests share: the variant they build the plugin for, and why
the plugin cannot be built here (then the tests skip)."""

from __future__ import annotations

from pathlib import Path

from devtools import hvd_nccl_build

ROOT = Path(__file__).resolve().parents[2]

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
