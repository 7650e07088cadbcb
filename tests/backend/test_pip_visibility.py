"""What a user sees from a plain ``pip wheel``/``pip install`` (no ``-v``), against a real pip.

pip captures a build backend's stderr and prints it only with ``-v`` or when
the hook fails. The backend's choice and fallbacks must still be visible, so
while a hook runs they also go to the controlling terminal (``console``).
These tests run stock pip on a pseudo-terminal, as a user's shell would, and
read what the terminal shows.
"""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .backend_helpers import REPO, clean_env
from .hostile_index import PROJECT, HostileIndex, drip, hostile_index, make_wheel


def on_terminal(argv: list[str], env: dict[str, str], limit: float = 120) -> tuple[int, str, float]:
    """Run ``argv`` with a pseudo-terminal as its controlling terminal; (exit code, what it showed, seconds)."""
    start = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: pty.fork made the terminal its controlling one
        os.chdir(REPO)
        os.execve(argv[0], argv, env)
    chunks: list[bytes] = []
    while time.monotonic() - start < limit:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace"), time.monotonic() - start


@pytest.fixture()
def index() -> Iterator[HostileIndex]:
    with hostile_index() as server:
        yield server


def pip_wheel(index: HostileIndex, out: Path, cache: Path, *settings: str) -> list[str]:
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-w", str(out)]
    for item in (
        f"index-url={index.index_url}",
        f"cache-dir={cache}",
        "index-timeout=2",
        "index-retries=1",
        *settings,
    ):
        argv += ["-C", item]
    return [*argv, str(REPO)]


def test_the_choice_is_shown_without_verbose(index: HostileIndex, tmp_path: Path) -> None:
    index.publish(make_wheel())
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb")
    rc, shown, _ = on_terminal(pip_wheel(index, tmp_path / "out", tmp_path / "cache"), env)
    assert rc == 0, shown
    assert "hvd-selector: selected prebuilt target=x86_64" in shown, shown
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["hvd_selector-0.1.0-py3-none-linux_x86_64.whl"]
    quiet = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb", HVD_SELECTOR_QUIET="1")
    rc, shown, _ = on_terminal(pip_wheel(index, tmp_path / "out2", tmp_path / "cache"), quiet)
    assert rc == 0 and "selected prebuilt" not in shown, shown


def test_a_hostile_index_ends_pip_with_one_clear_line(index: HostileIndex, tmp_path: Path) -> None:
    """A page dripping one byte a second: pip fails within the deadline, our line says why, nothing built."""
    index.publish(make_wheel())
    page = index.routes[f"/simple/{PROJECT}/"]
    assert isinstance(page, bytes)
    index.routes[f"/simple/{PROJECT}/"] = drip(page)
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb")
    cache = tmp_path / "cache"
    argv = pip_wheel(index, tmp_path / "out", cache, "build-policy=never-build")
    rc, shown, seconds = on_terminal(argv, env)
    assert rc != 0, shown
    assert "Traceback" not in shown, shown
    errors = [line for line in shown.splitlines() if "hvd-selector: error:" in line]
    assert errors and "no complete answer within 2 s" in errors[-1], shown
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    local = ("catalog-memos",)  # the checkout's catalog, parsed: nothing from the index
    assert not [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock" and p.parent.name not in local]
    assert seconds < 40, f"{seconds:.1f} s\n{shown}"  # pip start-up + 2 hooks x (2 attempts x 2 s + back-off)
