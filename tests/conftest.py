"""Suite-wide test options: GPU tests run only when asked for.

Tests marked ``gpu`` need a real NVIDIA GPU; they are skipped unless pytest
gets ``--run-gpu`` or the environment has ``HVD_SELECTOR_RUN_GPU=1``, so the
suite passes on CPU-only machines and CI without pretending to have tested a GPU.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-gpu",
        action="store_true",
        default=False,
        help="run tests marked gpu (they need an NVIDIA GPU); same as HVD_SELECTOR_RUN_GPU=1",
    )


def _gpu_requested(config: pytest.Config) -> bool:
    flag = os.environ.get("HVD_SELECTOR_RUN_GPU", "").strip().lower()
    return bool(config.getoption("--run-gpu")) or flag in ("1", "true", "yes", "on")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU (run with --run-gpu)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_requested(config):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: run with --run-gpu or HVD_SELECTOR_RUN_GPU=1")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
