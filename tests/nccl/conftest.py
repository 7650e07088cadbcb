"""Builds the nccl variant's plugin once per session with the real nvcc and the
nvidia-nccl-cu13 wheel, installed in a site-packages-like prefix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "native" / "nccl" / "standalone"))

import hvd_nccl_build  # noqa: E402

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


@pytest.fixture(scope="session")
def built_plugin(tmp_path_factory: pytest.TempPathFactory) -> hvd_nccl_build.Built:
    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    variant = catalog.parse_variant(TEST_VARIANT)
    built = hvd_nccl_build.build(variant, tmp_path_factory.mktemp("hvd_nccl"), catalog=catalog)
    hvd_nccl_build.wheel_layout(built)
    return built
