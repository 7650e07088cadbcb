"""Atomic file writes: readers see the old file or the new one, never half.

``write_output`` is the one way a command writes a file the user names
(``matrix -o``, ``plan -o``, ``cmake-config --write``, ``spack package
--write``): it writes over a regular file or a new path only. Renaming a
temporary file over a FIFO, a device node or a directory would replace it
(as root, ``-o /dev/null`` would replace the system's ``/dev/null``), so any
of those is one line and exit 2. A symbolic link is refused too, whatever it
points at: replacing it would turn the link into a file, writing through it
would let whoever made the link choose which file is written (a link planted
in a shared directory such as ``/tmp``); write to its target by name instead.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from selector_backend.errors import InputError


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically; ``mode`` sets permissions (mkstemp's are 0600).

    ``durable=False`` skips the fsync: for a cache whose reader checks what it
    loads, where a file a crash left empty is only a miss."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        fill(fd, data, durable=durable)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fill(fd: int, data: bytes, *, durable: bool) -> None:
    """Write ``data`` to the new file open on ``fd`` and close it; ``durable`` also fsyncs it."""
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        if durable:
            os.fsync(handle.fileno())


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_output(path: Path, text: str, what: str) -> None:
    """Write ``text`` to the file a user named for ``what`` (an output option), atomically.

    Only a regular file is replaced (keeping its permissions) and a new file is
    made as ``open`` would make it (0666 less the umask); anything else at
    ``path`` is an InputError, and so is a path that cannot be written.
    """
    path = Path(path)
    try:
        info: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        from selector_backend.files.safeparse import file_kind

        hint = "; name its target instead" if stat.S_ISLNK(info.st_mode) else ""
        raise InputError(
            f"{path} is {file_kind(info.st_mode)}: {what} is written only to a regular file or a new path, "
            f"refusing to replace it{hint}"
        )
    mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
    try:
        atomic_write_bytes(path, text.encode("utf-8"), mode)
    except OSError as exc:
        raise InputError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
