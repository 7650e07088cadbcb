"""tests/conftest.py: gpu tests skipped unless --run-gpu or HVD_SELECTOR_RUN_GPU=1; -n auto's worker count."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .engine_helpers import ROOT, nested_pytest_env

PROBE = """
import pytest

@pytest.mark.gpu
def test_needs_gpu():
    raise AssertionError("ran")

def test_plain():
    pass
"""


@pytest.mark.parametrize(
    ("args", "env", "outcome"),
    [
        ([], {}, "1 passed, 1 skipped"),
        (["--run-gpu"], {}, "1 failed, 1 passed"),
        ([], {"HVD_SELECTOR_RUN_GPU": "1"}, "1 failed, 1 passed"),
    ],
)
def test_gpu_marker(tmp_path: Path, args: list[str], env: dict[str, str], outcome: str) -> None:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    # no third-party plugins: only the conftest under test matters, and startup stays fast
    full = nested_pytest_env("HVD_SELECTOR_RUN_GPU", **env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers", *args, str(tmp_path)],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert outcome in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(
    ("env", "workers"), [({}, "2/2 workers"), ({"PYTEST_XDIST_AUTO_NUM_WORKERS": "1"}, "1/1 worker")]
)
def test_auto_is_one_worker_more_than_the_cpus(tmp_path: Path, env: dict[str, str], workers: str) -> None:
    """-n auto (pyproject.toml's addopts) starts one pytest-xdist worker more than the usable CPUs: two
    for a pytest allowed one CPU (pytest-xdist alone would start one), unless PYTEST_XDIST_AUTO_NUM_WORKERS
    says how many."""
    pytest.importorskip("xdist")
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text("def test_plain():\n    pass\n", encoding="utf-8")
    full = nested_pytest_env("PYTEST_XDIST_AUTO_NUM_WORKERS", **env)
    one_cpu = {min(os.sched_getaffinity(0))}
    # --basetemp: pytest-xdist makes the temporary folder at once, and a numbered one would have pytest
    # delete the oldest pytest-of-<user>/pytest-<N> folders (gigabytes after a few suite runs) first
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-p", "no:cacheprovider", "-n", "auto",
         f"--basetemp={tmp_path / 'basetemp'}", str(tmp_path)],
        cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, one_cpu),
    )  # fmt: skip
    assert f"created: {workers}" in proc.stdout, proc.stdout[-2000:]
