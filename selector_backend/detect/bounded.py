"""Time-bounded helpers: detection must never hang on a sick driver or tool."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timeout_seconds() -> float:
    """HVD_SELECTOR_DETECT_TIMEOUT (default 5 s); a bad value is an error, never silently the default."""
    text = os.environ.get("HVD_SELECTOR_DETECT_TIMEOUT", "5")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # also false for nan
        from selector_backend.errors import InputError

        raise InputError(f"HVD_SELECTOR_DETECT_TIMEOUT={text!r} must be a number of seconds above 0, at most 3600")
    return max(0.1, value)


def which(name: str) -> str | None:
    """shutil.which without importing shutil (it drags in bz2/lzma/zlib: a cold-start cost)."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def run_text(argv: list[str], notes: list[str]) -> str | None:
    """stdout+stderr of a command, or None (with a note) on failure/timeout."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_seconds(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        notes.append(f"{argv[0]}: timed out after {timeout_seconds():g} s")
        return None
    except OSError as exc:
        notes.append(f"{argv[0]}: cannot run ({exc.strerror or exc})")
        return None
    return (done.stdout or "") + (done.stderr or "")


def call_with_timeout(fn: Callable[[], T], what: str) -> T:
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
    thread.join(timeout_seconds())
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {timeout_seconds():g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
