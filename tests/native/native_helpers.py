"""How the native tests run their code: worker scripts (workers/) under
``hvd-selector run``, and hvd_selector's pure-Python modules from the source
tree without a built core. Building the variants is devtools.native_builds."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

from devtools.native_builds import REPO, Build, run_argv

WORKERS = Path(__file__).resolve().parent / "workers"


def launch(
    build: Build, np_: int, script: str, *args: str, cwd: Path, timeout: float = 180, **env: str
) -> subprocess.CompletedProcess[str]:
    """hvd-selector run -np N python workers/<script> args... (output captured)."""
    cmd = run_argv(np_, WORKERS / script, *args)
    return subprocess.run(cmd, cwd=cwd, env=build.env(**env), capture_output=True, text=True, timeout=timeout)


def source_module(name: str) -> types.ModuleType:
    """hvd_selector.<name> from the source tree without running the package's
    __init__ (which needs a built core): the modules are loaded as members of
    a stand-in package whose path is the source directory."""
    package = "hvd_selector_source"
    if package not in sys.modules:
        stub = types.ModuleType(package)
        stub.__path__ = [str(REPO / "hvd_selector")]
        sys.modules[package] = stub
    return importlib.import_module(f"{package}.{name}")


def assert_checks_passed(out_dir: Path, rank: int, count: int) -> None:
    """A worker's OUT_DIR/rank<rank>.json: `count` checks, each "" (passed) or its failure."""
    results = json.loads((out_dir / f"rank{rank}.json").read_text())
    assert len(results) == count, sorted(results)
    failed = {name: text for name, text in results.items() if text}
    assert not failed, f"rank {rank}: " + "\n".join(f"{k}:\n{v}" for k, v in failed.items())
