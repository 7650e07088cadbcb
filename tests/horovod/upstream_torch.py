"""Run Horovod's own test/parallel/test_torch.py against hvd_selector.torch.

Usage (from the repository root): python -m tests.horovod.upstream_torch PATH/test/parallel/test_torch.py
[--np 2] [--timeout S] [--build installed|checkout] [--strays] [--busy N] [-- PYTEST_ARGS].
``--build installed`` tests the hvd-selector that pip installed into this Python (on a
GPU host: the GPU build), ``checkout`` builds (or reuses) this checkout's gloo variant;
the default is ``installed`` where this Python has hvd-selector installed, else ``checkout``.

The file is Horovod's, fetched by you and never copied into this repository;
it runs unchanged. ``import horovod.torch`` is answered by a two-line shim
package in a temporary directory (``sys.modules["horovod.torch"] =
hvd_selector.torch``; ``mock`` is the standard library's ``unittest.mock``; common.py's
``horovod.runner.util.threads.in_thread`` is a plain thread),
and ``common.py`` comes from the same checkout's
``test/utils/``. Each rank gets the MPI-style rank variables the suite's
``mpi_env_rank_and_size()`` reads, and ``HOROVOD_RANK`` (the suite then
barriers and shuts down after every test, as under Horovod's Gloo runner).
Prints each rank's passed/failed/skipped counts and every failure's first
line; exit 0 when the suite ran (whatever its results), 2 on bad input.
``--strays`` throws stray connections at every port the job listens on while
it runs, ``--busy N`` spins N processes beside it (a loaded machine): the
suite must pass the same set either way.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:
    # Run as a file (python3 tests/horovod/upstream_torch.py, as ../shared/gpu-check/run.sh does): import
    # devtools from the checkout's root. sys.path, not PYTHONPATH, so the ranks still import the installed build.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # noqa: TID251

from devtools import native_builds
from devtools.stray_connections import BusyLoops, StrayConnections

SHIM = 'import sys\nimport hvd_selector.torch as _m\nsys.modules["horovod.torch"] = _m\n'
THREADS = (  # common.py imports Horovod's in_thread (used by its delay() helper only)
    "import threading\n\n\ndef in_thread(target, args=(), name=None, daemon=True, silent=False):\n"
    "    t = threading.Thread(target=target, args=args, name=name, daemon=daemon)\n"
    "    t.start()\n    return t\n"
)
MOCK = 'import sys\nimport unittest.mock\nsys.modules["mock"] = unittest.mock\n'  # PyPI's mock is its backport
# the rank and size from whichever launcher `run` used: its own (gloo builds) or mpirun (MPI builds)
RANK_ENV = (
    'r="${HVD_SELECTOR_RANK:-${OMPI_COMM_WORLD_RANK:-$PMI_RANK}}"; '
    'n="${HVD_SELECTOR_SIZE:-${OMPI_COMM_WORLD_SIZE:-$PMI_SIZE}}"; '
    'export HOROVOD_RANK="$r" HOROVOD_SIZE="$n" PMI_RANK="$r" PMI_SIZE="$n"; '
)


@dataclass
class RankResult:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def read_junit(path: Path) -> RankResult:
    """One rank's junit XML as test names per outcome (failure text: its first line)."""
    result = RankResult()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            result.failed[name] = (bad.get("message") or bad.text or "").strip().splitlines()[0][:300]
        elif skip is not None:
            result.skipped[name] = (skip.get("message") or "").strip()[:200]
        else:
            result.passed.append(name)
    return result


def common_of(test_file: Path) -> Path:
    """The suite's test/utils/common.py beside it (FileNotFoundError when it is not there)."""
    common = test_file.resolve().parent.parent / "utils" / "common.py"
    if not common.is_file():
        raise FileNotFoundError(f"{common} is missing: pass test_torch.py inside Horovod's test/parallel/ directory")
    return common


def stage(test_file: Path, work: Path) -> Path:
    """Lay out parallel/test_torch.py, utils/common.py and the shim; returns the test's copy."""
    common = common_of(test_file)
    (work / "parallel").mkdir(parents=True)
    (work / "utils").mkdir()
    (work / "shim" / "horovod").mkdir(parents=True)
    shutil.copy(test_file, work / "parallel" / "test_torch.py")
    shutil.copy(common, work / "utils" / "common.py")
    (work / "shim" / "horovod" / "__init__.py").write_text("")
    (work / "shim" / "horovod" / "torch.py").write_text(SHIM)
    (work / "shim" / "mock.py").write_text(MOCK)
    (work / "shim" / "horovod" / "runner" / "util").mkdir(parents=True)
    (work / "shim" / "horovod" / "runner" / "__init__.py").write_text("")
    (work / "shim" / "horovod" / "runner" / "util" / "__init__.py").write_text("")
    (work / "shim" / "horovod" / "runner" / "util" / "threads.py").write_text(THREADS)
    return work / "parallel" / "test_torch.py"


@dataclass
class Launch:
    """What the launcher said, and what the stray connections reached."""

    returncode: int
    stdout: str
    stderr: str
    stray_ports: int = 0
    stray_connections: int = 0


def run(
    test_file: Path,
    np_: int = 2,
    timeout: float = 1200,
    pytest_args: list[str] | None = None,
    env: dict | None = None,
    strays: bool = False,
    busy: int = 0,
) -> tuple[list[RankResult], Launch]:
    """Run the suite under ``hvd-selector run -np N``; returns each rank's results and the launcher's output."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="hvd-upstream-") as tmp:
        work = Path(tmp)
        copy = stage(test_file, work)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work / "shim"), env.get("PYTHONPATH", "")) if p)
        extra = " ".join(f"'{a}'" for a in (pytest_args or []))
        command = (
            RANK_ENV + f'exec "{sys.executable}" -m pytest -q -p no:cacheprovider -o addopts="" '
            f'--junitxml="{work}/rank$HOROVOD_RANK.xml" "{copy}" {extra}'
        )
        argv = [sys.executable, "-m", "selector_backend", "run", "-np", str(np_), "sh", "-c", command]
        with contextlib.ExitStack() as load:
            if busy:
                load.enter_context(BusyLoops(busy))
            proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            attack = load.enter_context(StrayConnections(proc.pid)) if strays else None
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            load.close()
        launch = Launch(proc.returncode, out, err)
        if attack is not None:
            launch.stray_ports, launch.stray_connections = len(attack.ports), attack.connected
        results = [read_junit(work / f"rank{r}.xml") for r in range(np_) if (work / f"rank{r}.xml").exists()]
    return results, launch


def summary(results: list[RankResult]) -> str:
    lines = []
    for r, res in enumerate(results):
        lines.append(f"rank {r}: {len(res.passed)} passed, {len(res.failed)} failed, {len(res.skipped)} skipped")
        for name, text in sorted(res.failed.items()):
            lines.append(f"  FAILED {name}: {text}")
        for name, text in sorted(res.skipped.items()):
            lines.append(f"  skipped {name}: {text}")
    return "\n".join(lines)


def installed_env() -> dict[str, str] | None:
    """The environment for testing the hvd-selector installed in this Python; None where there is none."""
    try:
        dist = importlib.metadata.distribution("hvd-selector")
    except importlib.metadata.PackageNotFoundError:
        return None
    print(f"testing the installed hvd-selector {dist.version} ({dist.locate_file('')})", flush=True)
    env = dict(os.environ)
    env.setdefault("HVD_SELECTOR_TIMEOUT", "20")
    return env


def checkout_env() -> dict[str, str]:
    """The environment for testing this checkout's gloo variant (built here, or reused)."""
    print("testing this checkout's gloo-x86_64_v3 build", flush=True)
    return native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO).env()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_file", type=Path, help="Horovod's test/parallel/test_torch.py")
    parser.add_argument("--np", type=int, default=2, dest="np_")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds for the whole run")
    parser.add_argument(
        "--build",
        choices=("installed", "checkout"),
        help="the installed hvd-selector or this checkout's gloo build (default: installed where there is one)",
    )
    parser.add_argument("--strays", action="store_true", help="throw stray connections at the job's ports")
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="spin N processes beside the job")
    # what follows "--" goes to pytest (e.g. -- -k join); split here, as argparse's handling of "--" varies
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    pytest_args = argv[cut + 1 :]
    if not args.test_file.is_file():
        print(f"error: {args.test_file} is not a file; fetch Horovod and pass test/parallel/test_torch.py")
        return 2
    try:
        common_of(args.test_file)
        env = installed_env() if args.build != "checkout" else None
        if env is None and args.build == "installed":
            print("error: this Python has no hvd-selector installed: pip install it, or pass --build checkout")
            return 2
        results, proc = run(
            args.test_file, args.np_, args.timeout, pytest_args, env or checkout_env(), args.strays, args.busy
        )
    except FileNotFoundError as exc:
        print(f"error: {exc}")
        return 2
    if len(results) < args.np_:
        print(proc.stdout[-4000:] + proc.stderr[-4000:])
        print(f"error: only {len(results)} of {args.np_} ranks wrote results (launcher exit {proc.returncode})")
        return 4
    print(summary(results))
    if args.strays:
        print(f"stray connections: {proc.stray_connections} to {proc.stray_ports} port(s) of the job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
