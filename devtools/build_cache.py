"""Build outputs kept under build/ and keyed by a hash of their sources, made at most once.

A test session (or each pytest-xdist worker of one, or a benchmark) that needs a
build asks for ``build_once(folder, make)``: the first caller builds under an
exclusive file lock, every other caller waits for it and then reuses the result,
and a later session finds it there. A build that failed leaves no ``done``
mark, so the next caller starts it again from an empty folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_DIR = REPO / "build"


def build_once(folder: Path, make: Callable[[Path], object]) -> Path:
    """``folder``, built by ``make(folder)`` unless a finished build is already there."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            make(folder)
            (folder / "done").write_text("ok\n")
    return folder


def source_files(*paths: str) -> list[Path]:
    """The checkout's files under ``paths`` (tracked, or new and not ignored), sorted."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({REPO / name for name in out.decode().split("\0") if name and (REPO / name).is_file()})


def files_hash(files: Iterable[Path], *extra: str, root: Path = REPO) -> str:
    """A short hash of the files' names (relative to ``root``) and contents and of ``extra`` strings."""
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() if path.exists() else b"<missing>")
    for text in extra:
        h.update(text.encode() + b"\0")
    return h.hexdigest()[:12]


def refresh_file(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` unless it already holds the same bytes; atomically, so a
    process of another worker reading ``target`` meanwhile sees the old file or the new one."""
    data = source.read_bytes()
    if target.is_file() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    shutil.copystat(source, tmp)
    os.replace(tmp, target)
