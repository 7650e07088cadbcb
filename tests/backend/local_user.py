"""A real second local user for the local-attacker tests: made with useradd, removed with userdel.

The attacker's steps run in a child of the test process that has dropped to
that user (``setgid``/``setuid``): this interpreter may live where the other
user cannot read (``/root/.pyenv``), but a forked child needs nothing it has
not already loaded. A shared area both users reach stands for ``/tmp`` and
for a home directory Debian's useradd makes 0755.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest


class LocalUser(NamedTuple):
    name: str
    uid: int
    gid: int


def need_root() -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("needs root and useradd/userdel to make a second local user")


@contextmanager
def second_user(tag: str) -> Iterator[LocalUser]:
    """A new local user with a unique name (``hvd`` + tag + pid), removed afterwards."""
    import pwd

    need_root()
    name = f"hvd{tag}{os.getpid()}"[:31]
    subprocess.run(
        ["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@contextmanager
def shared_area() -> Iterator[Path]:
    """A root-owned 0755 directory in the system's temporary directory, removed afterwards."""
    area = Path(tempfile.mkdtemp(prefix="hvd-hardening-local-"))
    area.chmod(0o755)
    try:
        yield area
    finally:
        shutil.rmtree(area, ignore_errors=True)


def _become(user: LocalUser) -> None:
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)


def _fork_as(user: LocalUser, step: Callable[[], str], stay: bool) -> tuple[int, int]:
    """Fork a child that becomes ``user``, runs ``step`` and writes its answer (or ``error: ...``) as
    one line to a pipe; with ``stay`` it then waits to be killed. Returns (pid, the pipe's read end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            _become(user)
            answer = step()
        except BaseException as exc:  # reported to the parent
            answer = f"error: {type(exc).__name__}: {exc}"
        os.write(write, answer.encode() + b"\n")
        if stay:
            signal.pause()
        os._exit(0)
    os.close(write)
    return pid, read


def as_user(user: LocalUser, step: Callable[[], str]) -> str:
    """Run ``step`` as ``user`` in a forked child; returns what it returned (or ``error: ...``)."""
    pid, read = _fork_as(user, step, stay=False)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode().strip()
    os.waitpid(pid, 0)
    return answer


@contextmanager
def holding_as_user(user: LocalUser, step: Callable[[], str]) -> Iterator[str]:
    """Run ``step`` as ``user`` in a forked child that then stays alive (holding whatever it opened)
    until the block ends; yields what ``step`` returned."""
    pid, read = _fork_as(user, step, stay=True)
    try:
        with os.fdopen(read, "rb") as pipe:
            yield pipe.readline().decode().strip()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def snapshot(root: Path) -> dict[str, tuple[str, int, float]]:
    """Every entry under ``root`` (links not followed): kind, size and mtime, to compare before and after."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        out[str(path.relative_to(root))] = (kind, info.st_size if kind == "file" else 0, info.st_mtime)
    return out
