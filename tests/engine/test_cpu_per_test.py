"""devtools.cpu_per_test: each test's CPU seconds, its children's included, and the report by file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devtools import cpu_per_test

from .engine_helpers import ROOT, nested_pytest_env

PROBE = """
import subprocess, sys, time

BUSY = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass"

def test_busy_child():  # about 0.5 s of CPU in a child process the test waits for
    subprocess.run([sys.executable, "-c", BUSY], check=True)

def test_sleeps():
    time.sleep(0.3)
"""


def test_a_childs_cpu_is_counted_to_the_test_that_waited_for_it(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    record = tmp_path / "record"
    record.mkdir()
    (record / "old.jsonl").write_text('{"test": "tests/x/test_old.py::t", "own": 9, "children": 0, "wall": 9}\n')
    env = nested_pytest_env(PYTHONPATH=str(ROOT))
    args = ["-q", "-p", "no:cacheprovider", "-p", "devtools.cpu_per_test", f"--cpu-per-test-dir={record}"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, f"--basetemp={tmp_path / 'base'}", str(tmp_path / "test_probe.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "2 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {str(row["test"]).rsplit("::", 1)[1]: row for row in cpu_per_test.load(record)}
    assert set(rows) == {"test_busy_child", "test_sleeps"}, "the old record is replaced"
    busy, sleeps = rows["test_busy_child"], rows["test_sleeps"]
    assert busy["children"] >= 0.4, busy
    assert sleeps["children"] == 0 and sleeps["wall"] >= 0.3, sleeps
    text = cpu_per_test.report(cpu_per_test.load(record), top=5)
    assert text.splitlines()[0].startswith("2 tests, ")
    assert "test_probe.py" in text


def test_the_report_without_a_record_says_what_to_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.cpu_per_test", f"--cpu-per-test-dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"no records in {tmp_path}: run python -m pytest -p devtools.cpu_per_test first"
