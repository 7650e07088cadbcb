"""Suite-wide test options: GPU tests run only when asked for; modules stay on one xdist worker.

Tests marked ``gpu`` need a real NVIDIA GPU; they are skipped unless pytest
gets ``--run-gpu`` or the environment has ``HVD_SELECTOR_RUN_GPU=1``, so the
suite passes on CPU-only machines and CI without pretending to have tested a GPU.

The suite runs on pytest-xdist workers (``-n auto --dist loadgroup`` in
pyproject.toml; ``auto`` is one worker more than CPUs, below). Every test
without its own ``xdist_group`` mark is put in its module's group, so one
worker runs a module's tests in order, once per module fixture; a module
marked ``spread`` lets its tests go to any worker (their shared session
fixtures must be safe in several processes: devtools.build_cache).
See docs/reference/testing.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-gpu",
        action="store_true",
        default=False,
        help="run tests marked gpu (they need an NVIDIA GPU); same as HVD_SELECTOR_RUN_GPU=1",
    )


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent with -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than this process may use CPUs. About a fifth of the suite's
    wall time is spent waiting (on sockets, timeouts, jobs starting, downloads), which a third
    worker on 2 cores fills (docs/reference/testing.md). PYTEST_XDIST_AUTO_NUM_WORKERS still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return len(usable) + 1


def _gpu_requested(config: pytest.Config) -> bool:
    flag = os.environ.get("HVD_SELECTOR_RUN_GPU", "").strip().lower()
    return bool(config.getoption("--run-gpu")) or flag in ("1", "true", "yes", "on")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU (run with --run-gpu)")
    # registered here, beside the hook that uses them, so they hold without pytest-xdist (-p no:xdist) too
    config.addinivalue_line("markers", "xdist_group(name): tests of one group run on one xdist worker, in order")
    config.addinivalue_line("markers", "spread: this module's tests may run on several xdist workers at once")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook (pytest-xdist 3.8 gives it no order), which reads the group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: run with --run-gpu or HVD_SELECTOR_RUN_GPU=1")
    run_gpu = _gpu_requested(config)
    for item in items:
        if "gpu" in item.keywords and not run_gpu:
            item.add_marker(skip)
        if item.get_closest_marker("xdist_group") is None and item.get_closest_marker("spread") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def run_tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every pytest-xdist worker of this run shares (their own base folders sit in it: xdist's
    recipe for work done once per run, under a file lock, devtools.build_cache.build_once); without
    xdist, this process's base folder. Gone with pytest's old base folders, unlike build/."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(request.config, "workerinput") else base  # workerinput: an xdist worker
