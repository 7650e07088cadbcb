"""Writing small wheel files for tests (what a build backend would write)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def write_wheel(path: Path, files: Mapping[str, bytes]) -> Path:
    """A wheel at ``path`` holding ``files`` plus a RECORD with their hashes."""
    dist_info = next(name.split("/")[0] for name in files if name.split("/")[0].endswith(".dist-info"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        record = []
        for name, data in files.items():
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        archive.writestr(f"{dist_info}/RECORD", "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n")
    return path
