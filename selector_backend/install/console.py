"""Backend notices a user must see in a plain ``pip install``, not only with ``pip install -v``.

pip runs a build backend's hooks with stdout and stderr captured: it shows
them only with ``-v``, or all at once when a hook fails. The backend's
choice (which variant, prebuilt or source, and why) and every fallback (an
index that could not be read, a wheel skipped) would stay invisible in a
normal install. So while a PEP 517 hook runs, a notice also goes to the
controlling terminal, ``/dev/tty``, when the process has one and stderr is
not already it. Without a terminal (CI logs, ``docker build``) notices stay
in the captured stderr: ``pip install -v`` shows them, and a failed build
prints them. What must be seen everywhere (no CPU build for a host with
NVIDIA GPUs unasked) is never a notice: the build stops instead
(``backend._gpu_host_fallback``), terminal or not.
``HVD_SELECTOR_QUIET=1`` keeps them off the terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

_in_hook = False


@contextlib.contextmanager
def hook() -> Iterator[None]:
    """Mark the code inside as running under a build frontend that captures stderr."""
    global _in_hook
    previous, _in_hook = _in_hook, True
    try:
        yield
    finally:
        _in_hook = previous


def _quiet() -> bool:
    return os.environ.get("HVD_SELECTOR_QUIET", "").strip() not in ("", "0")


def _open_terminal() -> int:
    return os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))


def _to_terminal(line: str) -> None:
    if not _in_hook or _quiet():
        return
    with contextlib.suppress(OSError, ValueError):
        if sys.stderr.isatty():
            return  # already on the terminal
        fd = _open_terminal()
        try:
            os.write(fd, (line + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)


def notice(message: str) -> None:
    """A line the user should see: stderr always, and the terminal while a build hook runs."""
    line = f"hvd-selector: {message}"
    print(line, file=sys.stderr, flush=True)
    _to_terminal(line)


def warn(message: str) -> None:
    notice(f"warning: {message}")
