"""Builds the nccl variant's plugin once per session with the real nvcc and the
nvidia-nccl-cu13 wheel, installed in a site-packages-like prefix; and the nccl
variant with the stand-in plugin (see nccl_helpers.py)."""

from __future__ import annotations

import pytest

from devtools import hvd_nccl_build
from devtools.native_builds import NCCL, Build, build_variant

from .nccl_helpers import TEST_VARIANT, build_standin, toolchain_missing, with_standin


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


@pytest.fixture(scope="session")
def standin_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The nccl variant (core built with HVD_HAVE_NCCL) with the stand-in plugin in the real one's place."""
    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    nccl = build_variant("nccl-cuda13-x86_64_v3", NCCL)
    work = tmp_path_factory.mktemp("standin")
    return with_standin(nccl, build_standin(work / "plugin"), work / "stage")
