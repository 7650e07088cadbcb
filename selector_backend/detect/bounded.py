"""The outside programs detection runs: found on PATH, and run time-bounded (detection must never hang on a
sick driver or tool)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timeout_seconds(given: float | None = None) -> float:
    """The bound on one detector: ``given`` (the detect-timeout setting), else the setting read
    from the environment alone (callers without Settings); at least 0.1 s."""
    if given is None:
        from selector_backend.settings import env_setting

        given = float(env_setting("detect-timeout"))
    return max(0.1, given)


def find_program(name: str) -> str | None:
    """The first executable file ``name`` in a PATH directory, as ``shutil.which`` answers on POSIX (an
    empty PATH entry, the current directory, is not searched). Not ``shutil.which`` itself: importing
    ``shutil`` loads bz2, lzma and zlib, about 7 M instructions of a cold resolve (docs/reference/performance.md)."""
    for directory in os.get_exec_path():
        candidate = os.path.join(directory, name)
        if directory and os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def run_text(argv: list[str], notes: list[str], timeout: float | None = None) -> str | None:
    """stdout+stderr of a command, or None (with a note) on failure/timeout."""
    bound = timeout_seconds(timeout)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=bound,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        notes.append(f"{argv[0]}: timed out after {bound:g} s")
        return None
    except OSError as exc:
        notes.append(f"{argv[0]}: cannot run ({exc.strerror or exc})")
        return None
    return (done.stdout or "") + (done.stderr or "")


def call_with_timeout(fn: Callable[[], T], what: str, timeout: float | None = None) -> T:
    """Run ``fn`` in a daemon thread; give up (TimeoutError) after the bound.

    A hung NVML call cannot be cancelled, but the process no longer waits for it.
    """
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"hvd-selector-{what}", daemon=True)
    thread.start()
    bound = timeout_seconds(timeout)
    thread.join(bound)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {bound:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
