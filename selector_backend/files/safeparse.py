"""Untrusted input (JSON from the network, files the user names) with every failure as one line.

``json.loads`` raises ValueError for bad syntax, RecursionError for a
document nested thousands deep and UnicodeDecodeError for bytes that are not
UTF-8; an index page or a host-profile file can contain any of them.

A file named on the command line or in a variable is read by ``read_bytes``
alone: only a regular file, and only up to a size checked before the first
byte is read. A FIFO would block the open and every read, ``/dev/zero`` or
``/dev/urandom`` never end, and a directory is no file at all; each is one
line naming the path and what it is. The file is opened with ``O_NONBLOCK``
(opening a FIFO returns at once instead of waiting for a writer) and is
``stat``-ed before it is opened, so a device is never even opened, then
``fstat``-ed on what was opened. A symbolic link the user named is followed:
the reader runs with the user's own rights and reads nothing the user could
not read, so refusing links would protect nothing (the private cache, where
another user's link could steer a write, never follows one).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from selector_backend.errors import InputError, SelectorError

MAX_FILE_BYTES = 64 << 20
"""The most a file named by the user is read into memory (a host profile, fleet, plan, catalog, config)."""
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def loads(data: str | bytes, source: str, error: type[SelectorError] = InputError, hint: str = "") -> Any:
    """Parsed JSON, or ``error`` naming ``source`` and what is wrong (bad syntax followed by ``hint``)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{source} is JSON nested too deep to read; refusing it") from None
    except ValueError as exc:
        raise error(f"{source} is not valid JSON ({str(exc)[:200]}){hint}") from None


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, as an error message names it."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "a regular file" if stat.S_ISREG(mode) else "no file")


def size_text(count: int) -> str:
    """A byte count for a message: 64 MiB, 3.7 GiB, 512 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.3g} {unit}"
    return f"{count} bytes"


def _refuse_kind(path: Any, what: str, mode: int, error: type[SelectorError]) -> SelectorError:
    return error(f"{path}: {what} is {file_kind(mode)}, not a regular file; refusing to read it")


def open_regular(path: Any, what: str, error: type[SelectorError] = InputError) -> int:
    """A read-only descriptor of the regular file ``path``; anything else is one ``error`` line."""
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise _refuse_kind(path, what, before.st_mode, error)
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # swapped between the stat and the open
        os.close(fd)
        raise _refuse_kind(path, what, info.st_mode, error)
    return fd


def read_fd(fd: int, source: str, what: str, max_bytes: int, error: type[SelectorError] = InputError) -> bytes:
    """All of the regular file open on ``fd`` (which stays open), at most ``max_bytes``: the size is
    checked on ``fstat`` before reading and again while reading (a file may grow)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse_kind(source, what, info.st_mode, error)
    too_big = f"{source}: {what} is over the {size_text(max_bytes)} limit; refusing to read it"
    if info.st_size > max_bytes:
        raise error(
            f"{source}: {what} is {size_text(info.st_size)}, over the {size_text(max_bytes)} limit; refusing to read it"
        )
    chunks = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, min(max(info.st_size, 1 << 16), max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(too_big)
    except OSError as exc:
        raise error(f"{source}: cannot read {what} ({exc.strerror or exc})") from None
    return b"".join(chunks)


def read_bytes(path: Any, what: str, max_bytes: int = MAX_FILE_BYTES, error: type[SelectorError] = InputError) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``); anything else is one ``error`` line."""
    fd = open_regular(path, what, error)
    try:
        return read_fd(fd, str(path), what, max_bytes, error)
    finally:
        os.close(fd)


def read_text(path: Any, what: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A UTF-8 file's text (``read_bytes``'s rules); not UTF-8 is an InputError naming ``what``."""
    raw = read_bytes(path, what, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_json(path: Any, what: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """A JSON file (``read_bytes``'s rules, then ``loads``'s)."""
    return loads(read_bytes(path, what, max_bytes), f"{path}: {what}")


def only_chars(text: str, chars: bytes) -> bool:
    """Every character of ``text`` is one of the ASCII ``chars``. A whole column of strings joined is
    checked in one C loop (``bytes.translate`` deleting them leaves nothing), several times faster
    than a regex or a per-character walk."""
    return text.isascii() and not text.encode("ascii").translate(None, chars)
