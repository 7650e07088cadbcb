"""Members added to a finished wheel, each with its RECORD row: the install record, a project's variant records.

A wheel RECORD must list every member with its hash (uv refuses a member it
does not list), so adding a file is a rewrite of the whole archive, done
atomically: a failed run leaves the wheel as it was.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from selector_backend.errors import IntegrityError
from selector_backend.files.archives import open_zip

DIST_INFO = "{dist-info}"  # a member name's stand-in for the wheel's own .dist-info directory


def record_row(name: str, data: bytes) -> str:
    """A wheel RECORD row for the member ``name`` holding ``data`` (PEP 376: urlsafe base64 sha256, size)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"{name},sha256={digest},{len(data)}"


def add_members(wheel: Path, members: Mapping[str, bytes]) -> None:
    """Rewrite ``wheel`` in place (atomically) with ``members`` added or replaced (``{dist-info}/NAME`` names a
    member of its .dist-info directory)."""
    with open_zip(wheel, what="wheel") as source:  # verified or built here, and still bounded
        infos = source.infolist()
        records = [i.filename for i in infos if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise IntegrityError(f"{wheel.name}: expected one .dist-info/RECORD, found {len(records)}")
        dist_info = records[0].split("/")[0]
        added = {name.replace(DIST_INFO, dist_info, 1): data for name, data in members.items()}
        fd, tmp = tempfile.mkstemp(dir=wheel.parent, prefix=f".{wheel.name}.", suffix=".tmp")
        os.close(fd)
        try:
            # deflate level 1: the members are inflated and deflated again, and level 6 tripled the time this
            # takes for about 8 % fewer bytes in pip's wheel cache (the installed files are the same)
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
                for info in infos:
                    if info.filename in added:
                        continue  # an earlier copy (a record from an earlier install of this wheel): replaced
                    body = source.read(info)
                    if info.filename == records[0]:
                        rows = [r for r in body.decode("utf-8").splitlines() if r and r.split(",")[0] not in added]
                        last = rows.pop() if rows and rows[-1].startswith(records[0] + ",") else None
                        new_rows = [record_row(name, data) for name, data in added.items()]
                        body = "\n".join([*rows, *new_rows, *([last] if last else [])]).encode() + b"\n"
                        for name, data in added.items():
                            out.writestr(_member(name, info), data, compresslevel=1)
                    out.writestr(info, body, compresslevel=1)
            os.chmod(tmp, stat.S_IMODE(os.stat(wheel).st_mode))
            os.replace(tmp, wheel)
        finally:
            Path(tmp).unlink(missing_ok=True)


def _member(name: str, like: zipfile.ZipInfo) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def write_wheel(target: Path, files: Mapping[str, bytes]) -> Path:
    """A pure wheel at ``target`` holding ``files`` (its ``.dist-info`` among them) and their RECORD, written
    atomically and reproducibly: members in the given order, dated 1980-01-01 (the zip epoch), mode 0644."""
    dist_info = next(name.split("/")[0] for name in files if name.endswith(".dist-info/METADATA"))
    rows = [record_row(name, data) for name, data in files.items()]
    members = {**files, f"{dist_info}/RECORD": ("\n".join([*rows, f"{dist_info}/RECORD,,"]) + "\n").encode()}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target
