"""The cold ``resolve --json`` imports only what it uses: each module kept off its path here is one that a
change measurably took off (docs/reference/performance.md, "Where the cold resolve's extra instructions go")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import archspec
import pytest

from selector_backend.detect.bounded import find_program

from .engine_helpers import ROOT, clean_env

KEPT_OFF = (
    # shutil.which pulled in shutil, which imports bz2, lzma and zlib, each loading a shared library
    *("shutil", "bz2", "lzma", "zlib"),
    # a plain command line is read from the command's declared arguments (cli.arguments), not by argparse
    *("argparse", "gettext", "selector_backend.cli.parsers"),
)


def imported_by_a_cold_resolve(tmp_path: Path) -> set[str]:
    """The modules a fresh interpreter imports to run ``resolve --json``, beyond its own start-up, on the second
    run (the first fills the cache directory with the catalog's parsed form, as a user's first run does).

    ``-S``: no site-packages start-up hooks (``.pth`` files), which on some machines import shutil
    and friends before any code of ours runs; archspec is found through PYTHONPATH instead.
    """
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from selector_backend.cli.main import main\n"
        "assert main(['resolve', '--json']) == 0\n"
        "print(' '.join(sorted(set(sys.modules) - before)), file=sys.stderr)\n"
    )
    env = clean_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(archspec.__file__).parents[1])])
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-S", "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    return set(done.stderr.split())


def test_a_cold_resolve_imports_none_of_the_modules_taken_off_its_path(tmp_path: Path) -> None:
    imported = imported_by_a_cold_resolve(tmp_path)
    assert "selector_backend.engine.resolve" in imported  # it did resolve
    assert sorted(imported.intersection(KEPT_OFF)) == []


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("name", ["mpiexec", "nvidia-smi", "absent"])
def test_find_program_answers_as_shutil_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A directory and a file without the execute bit are passed over; the first PATH directory that
    holds an executable file wins."""
    (tmp_path / "dir-first" / name).mkdir(parents=True)
    plain = tmp_path / "not-executable" / name
    plain.parent.mkdir()
    plain.write_text("", encoding="utf-8")
    if name != "absent":
        executable(tmp_path / "second" / name)
        executable(tmp_path / "third" / name)
    dirs = ["dir-first", "not-executable", "missing", "second", "third"]
    monkeypatch.setenv("PATH", os.pathsep.join(str(tmp_path / d) for d in dirs))
    assert find_program(name) == shutil.which(name)
    assert find_program(name) == (None if name == "absent" else str(tmp_path / "second" / name))
