"""CPU seconds per test, where ``--durations`` gives wall seconds: a pytest plugin and its report.

On a machine whose CPUs are all busy (pytest-xdist fills them), a test's wall time says more about
what ran beside it than about the test; its CPU time (its own and that of the processes it started
and waited for: builds, pip, ranks) says what it costs the suite. ::

    python -m pytest -p devtools.cpu_per_test      # writes build/cpu-per-test/<worker pid>.jsonl
    python -m devtools.cpu_per_test [--top N]      # CPU by directory and by file, biggest first

``--cpu-per-test-dir DIR`` (both) puts the record elsewhere; a new run replaces the old record.

A process the test did not wait for (a daemon another process reaps) is counted where it is reaped,
so a module fixture's servers show up in the test that tears them down.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

OUT_DIR = Path(__file__).resolve().parents[1] / "build" / "cpu-per-test"


def _cpu() -> tuple[float, float]:
    """(this process, its waited-for children) in CPU seconds, user + system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class _Recorder:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.out: IO[str] | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        own, children, start = *_cpu(), time.monotonic()
        yield
        own_after, children_after = _cpu()
        if self.out is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.out = (self.folder / f"{os.getpid()}.jsonl").open("a", encoding="utf-8")
        row = {
            "test": item.nodeid.split("@", 1)[0],
            "own": round(own_after - own, 3),
            "children": round(children_after - children, 3),
            "wall": round(time.monotonic() - start, 3),
        }
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-per-test-dir", type=Path, default=OUT_DIR, help=f"where to write (default {OUT_DIR})")


def pytest_configure(config: pytest.Config) -> None:
    folder = Path(config.getoption("--cpu-per-test-dir"))
    if not hasattr(config, "workerinput"):  # the run's first process (xdist's controller, or -n 0): a new record
        for old in folder.glob("*.jsonl"):
            old.unlink()
    config.pluginmanager.register(_Recorder(folder), "cpu-per-test-recorder")


def load(folder: Path = OUT_DIR) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


def report(rows: list[dict[str, Any]], top: int) -> str:
    """CPU and wall seconds summed by directory, then the ``top`` files, biggest CPU first."""
    cpu: dict[str, float] = collections.defaultdict(float)
    wall: dict[str, float] = collections.defaultdict(float)
    for row in rows:
        file = str(row["test"]).split("::", 1)[0]
        for key in ((file.rpartition("/")[0] or ".") + "/", file):
            cpu[key] += float(row["own"]) + float(row["children"])
            wall[key] += float(row["wall"])
    ranked = sorted(cpu, key=lambda key: -cpu[key])
    folders, files = [k for k in ranked if k.endswith("/")], [k for k in ranked if not k.endswith("/")]
    lines = [f"{len(rows)} tests, {sum(cpu[k] for k in folders):.0f} CPU-s", "", "   CPU-s   wall-s  directory"]
    lines += [f"{cpu[k]:8.1f} {wall[k]:8.1f}  {k}" for k in folders]
    lines += ["", "   CPU-s   wall-s  file"]
    lines += [f"{cpu[k]:8.1f} {wall[k]:8.1f}  {k}" for k in files[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--top", type=int, default=25, help="how many files to list (default 25)")
    parser.add_argument("--cpu-per-test-dir", type=Path, default=OUT_DIR, help=f"the run's record (default {OUT_DIR})")
    args = parser.parse_args(argv)
    rows = load(args.cpu_per_test_dir)
    if not rows:
        parser.exit(2, f"no records in {args.cpu_per_test_dir}: run python -m pytest -p devtools.cpu_per_test first\n")
    print(report(rows, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
