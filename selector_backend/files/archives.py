"""Zips and tars from elsewhere, bounded before anything parses them.

``zipfile`` parses a zip's whole central directory when it opens the file, so a
limit on ``len(infolist())`` comes too late: a wheel whose directory listed
4,000,000 members took a pip install to 2 GB and 34 s before it was refused.
Here the end-of-central-directory record (and the zip64 one, where the record
points to it) is read first: the member count and the directory's size it gives
are bounded, and then the directory is walked one 46-byte header at a time,
keeping nothing, to count the members ``zipfile`` would build (a record can lie
about the count; the walk cannot). Only then does ``zipfile`` open the file, at
a cost bounded by ``MAX_DIRECTORY_BYTES`` plus ``MAX_MEMBERS`` entries.

The end record is found as ``zipfile`` finds it (a record with no comment at the
very end, else the last signature in the file's last 64 KiB), so the checked
directory is the one ``zipfile`` (and pip) then reads. A tar has no directory:
its members are counted, and their bytes bounded, as they are read.
"""

from __future__ import annotations

import struct
import tarfile
import zipfile
from pathlib import Path
from typing import IO, NamedTuple

from selector_backend.errors import IntegrityError, SelectorError

MAX_MEMBERS = 100_000
#: A central directory entry is 46 bytes plus its name (and extra field): 100,000 members with
#: 200-byte names fit; the 4,000,000-member bomb's 170 MB directory does not.
MAX_DIRECTORY_BYTES = 32 << 20
#: An sdist is read whole into memory to be rewritten (``install/sdist.py``); the project's is a few MB.
MAX_TAR_BYTES = 256 << 20

_END = struct.Struct("<4s4H2LH")  # end of central directory: signature ... directory size, offset, comment length
_END_SIGNATURE = b"PK\x05\x06"
_MAX_COMMENT = 0xFFFF
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, offset of the zip64 record, disks
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")  # ..., entries on this disk, entries, directory size, offset
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # one central directory header, before its name
_CENTRAL_SIGNATURE = b"PK\x01\x02"


class ZipDirectory(NamedTuple):
    """What a zip's end record says about its central directory."""

    members: int  # as the record claims
    size: int  # bytes
    start: int  # file offset, as zipfile computes it
    zip64: bool


class _Unreadable(Exception):
    """The file is not a zip this module (and zipfile) can read."""


def zip_directory(handle: IO[bytes]) -> ZipDirectory:
    """The central directory's count, size and place, from the end records alone (at most 64 KiB read)."""
    handle.seek(0, 2)
    file_size = handle.tell()
    tail_start = max(file_size - _END.size - _MAX_COMMENT, 0)
    handle.seek(tail_start)
    tail = handle.read()
    at = len(tail) - _END.size
    if not (at >= 0 and tail[at : at + 4] == _END_SIGNATURE and tail[-2:] == b"\0\0"):
        at = tail.rfind(_END_SIGNATURE)  # a record followed by a comment, as zipfile looks for it
    if at < 0 or at + _END.size > len(tail):
        raise _Unreadable("no end-of-central-directory record")
    _, _, _, _, members, size, offset, _ = _END.unpack_from(tail, at)
    location = tail_start + at
    zip64 = False
    if location >= _ZIP64_LOCATOR.size:
        handle.seek(location - _ZIP64_LOCATOR.size)
        locator = handle.read(_ZIP64_LOCATOR.size)
        if locator[:4] == b"PK\x06\x07":
            _, disk, _, disks = _ZIP64_LOCATOR.unpack(locator)
            if disk != 0 or disks > 1:
                raise _Unreadable("a zip that spans several disks")
            record_at = location - _ZIP64_LOCATOR.size - _ZIP64_END.size
            if record_at >= 0:
                handle.seek(record_at)
                record = handle.read(_ZIP64_END.size)
                if record[:4] == b"PK\x06\x06":
                    members, size, offset = _ZIP64_END.unpack(record)[7:10]
                    zip64 = True
    start = location - size - (_ZIP64_LOCATOR.size + _ZIP64_END.size if zip64 else 0)
    if start < 0 or offset < 0:
        raise _Unreadable("its central directory lies before the start of the file")
    return ZipDirectory(members, size, start, zip64)


def _count_members(handle: IO[bytes], directory: ZipDirectory, limit: int) -> int:
    """The headers in the directory, walked as zipfile walks them; stops at ``limit`` + 1."""
    handle.seek(directory.start)
    done = count = 0
    while done < directory.size and count <= limit:
        head = handle.read(_CENTRAL.size)
        if len(head) != _CENTRAL.size or head[:4] != _CENTRAL_SIGNATURE:
            raise _Unreadable("a truncated or corrupt central directory")
        fields = _CENTRAL.unpack(head)
        skip = fields[12] + fields[13] + fields[14]  # name, extra field, comment
        handle.seek(skip, 1)
        done += _CENTRAL.size + skip
        count += 1
    return count


def check_zip(path: Path, label: str, *, error: type[SelectorError] = IntegrityError, what: str = "zip") -> None:
    """Refuse, in one line, a zip whose directory is over the limits, before anything parses it."""
    try:
        with path.open("rb") as handle:
            directory = zip_directory(handle)
            if directory.members > MAX_MEMBERS:
                raise error(
                    f"{label}: its zip directory lists {directory.members} members, over the {MAX_MEMBERS} limit; "
                    f"refusing the {what}"
                )
            if directory.size > MAX_DIRECTORY_BYTES:
                raise error(
                    f"{label}: its zip directory is {directory.size} bytes, over the {MAX_DIRECTORY_BYTES} limit; "
                    f"refusing the {what}"
                )
            found = _count_members(handle, directory, MAX_MEMBERS)
    except (_Unreadable, OSError) as exc:
        raise error(f"{label}: not a readable {what} ({exc}); refusing it") from None
    if found > MAX_MEMBERS:
        raise error(
            f"{label}: its zip directory holds over {MAX_MEMBERS} members (its end record claims "
            f"{directory.members}); refusing the {what}"
        )


def open_zip(
    path: Path, label: str | None = None, *, error: type[SelectorError] = IntegrityError, what: str = "zip"
) -> zipfile.ZipFile:
    """``zipfile.ZipFile(path)`` once ``check_zip`` has passed it; anything unreadable is one ``error`` line."""
    label = label or path.name
    check_zip(path, label, error=error, what=what)
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise error(f"{label}: not a readable {what} ({exc}); refusing it") from None


def read_tar(
    path: Path, label: str | None = None, *, error: type[SelectorError] = IntegrityError
) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """A gzipped tar's members and file contents, at most ``MAX_MEMBERS`` of them and ``MAX_TAR_BYTES`` in all."""
    label = label or path.name
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    total = 0
    try:
        with tarfile.open(path, "r:gz") as source:
            for member in source:
                if len(members) == MAX_MEMBERS:
                    raise error(f"{label}: more than {MAX_MEMBERS} members; refusing it")
                data = None
                if member.isfile():
                    total += member.size
                    if total > MAX_TAR_BYTES:
                        raise error(f"{label}: its files hold over {MAX_TAR_BYTES} bytes; refusing it")
                    reader = source.extractfile(member)
                    data = reader.read() if reader is not None else b""
                members.append((member, data))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise error(f"{label}: not a readable tar.gz ({exc}); refusing it") from None
    if not members:
        raise error(f"{label}: an empty tar.gz; refusing it")
    return members
