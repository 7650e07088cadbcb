"""Builds the nccl variant's plugin once per session with the real nvcc and the
nvidia-nccl-cu13 wheel, installed in a site-packages-like prefix."""

from __future__ import annotations

import pytest

from devtools import hvd_nccl_build

from .nccl_helpers import TEST_VARIANT, toolchain_missing


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
