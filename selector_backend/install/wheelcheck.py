"""What a downloaded wheel must look like before it is cached or opened.

The sha256 proves a wheel is the one the index listed, not that the index is
honest: a hostile index can list a wheel whose members escape the install
directory (``../``, absolute paths) or whose small metadata files inflate to
gigabytes. pip would then leave a partial install, or the backend would run
out of memory reading variant.json. Both are refused here, from the zip's
directory alone, before anything is extracted or cached.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from selector_backend.errors import IntegrityError

MAX_MEMBERS = 100_000
MAX_METADATA_BYTES = 1 << 20  # variant.json, METADATA, RECORD … are kilobytes
METADATA_SUFFIXES = (".dist-info/variant.json", "/variant.json", ".dist-info/METADATA", ".dist-info/WHEEL")


def unsafe_member(name: str) -> str | None:
    """Why a member name is unsafe to extract, or None."""
    if not name or "\0" in name:
        return "an empty name or a NUL byte"
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):  # a drive letter is absolute on Windows
        return "an absolute path"
    if ".." in parts:
        return "a '..' component"
    return None


def check_wheel(path: Path, label: str | None = None) -> None:
    """Refuse a wheel that is not a zip, escapes its directory, or carries inflated metadata."""
    label = label or path.name
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise IntegrityError(f"{label}: not a readable wheel ({exc}); refusing it") from None
    if len(infos) > MAX_MEMBERS:
        raise IntegrityError(f"{label}: {len(infos)} members is over the {MAX_MEMBERS} limit; refusing it")
    for info in infos:
        why = unsafe_member(info.filename)
        if why:
            raise IntegrityError(f"{label}: member {info.filename!r} has {why}; refusing the wheel (nothing cached)")
        if info.filename.endswith(METADATA_SUFFIXES) and info.file_size > MAX_METADATA_BYTES:
            raise IntegrityError(
                f"{label}: {info.filename} would inflate to {info.file_size} bytes "
                f"(limit {MAX_METADATA_BYTES}); refusing the wheel"
            )


def read_member(archive: zipfile.ZipFile, name: str, limit: int = MAX_METADATA_BYTES) -> bytes:
    """A member's bytes, never more than ``limit`` (the declared size can lie; the read is capped too)."""
    label = f"{Path(archive.filename or 'wheel').name}:{name}"
    try:
        info = archive.getinfo(name)
        if info.file_size > limit:
            raise IntegrityError(f"{label} would inflate to {info.file_size} bytes (limit {limit}); refusing it")
        with archive.open(info) as handle:
            data = handle.read(limit + 1)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, EOFError) as exc:
        raise IntegrityError(f"{label}: cannot be read ({exc})") from None
    if len(data) > limit:
        raise IntegrityError(f"{label} is over {limit} bytes; refusing it")
    return data
