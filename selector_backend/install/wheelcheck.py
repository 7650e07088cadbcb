"""What a downloaded wheel must look like before it is cached or opened.

The sha256 proves a wheel is the one the index listed, not that the index is
honest: a hostile index can list a wheel whose members escape the install
directory (``../``, absolute paths) or whose small metadata files inflate to
gigabytes. pip would then leave a partial install, or the backend would run
out of memory reading variant.json. Both are refused here, from the zip's
directory alone, before anything is extracted or cached; a directory too large
to parse is refused from its end record before that (``files/archives.py``).
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from selector_backend.errors import IntegrityError
from selector_backend.files.archives import open_zip

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
    """Refuse a wheel that is not a zip, lists too many members, escapes its directory, or carries
    inflated metadata."""
    label = label or path.name
    with open_zip(path, label, what="wheel") as archive:
        infos = archive.infolist()
    for info in infos:
        why = unsafe_member(info.filename)
        if why:
            raise IntegrityError(f"{label}: member {info.filename!r} has {why}; refusing the wheel (nothing cached)")
        if info.filename.endswith(METADATA_SUFFIXES) and info.file_size > MAX_METADATA_BYTES:
            raise IntegrityError(
                f"{label}: {info.filename} would inflate to {info.file_size} bytes "
                f"(limit {MAX_METADATA_BYTES}); refusing the wheel"
            )


def read_member(
    archive: zipfile.ZipFile, name: str, limit: int = MAX_METADATA_BYTES, *, wheel: str | None = None
) -> bytes:
    """A member's bytes, never more than ``limit`` (the declared size can lie; the read is capped too).

    ``wheel`` names the wheel in errors (the file may be a download's temporary file)."""
    label = f"{wheel or Path(archive.filename or 'wheel').name}:{name}"
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
