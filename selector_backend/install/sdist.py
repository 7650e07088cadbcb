"""Finishing an sdist: a default variant index, and the backend's imports carried inside.

``python -m build --sdist -C index-url=URL`` makes an sdist whose backend
looks at URL unless the installing user configures another index: the
published sdist knows where its own prebuilt variants live, so stock
``pip install hvd-selector`` needs no extra flags.

Every sdist also carries pure-Python copies of archspec, packaging and tomli (with
their licence files) under ``selector_backend/_vendor/`` and declares no
build requirements of its own (tomli too, for Python 3.10), so pip's
isolated build environment installs nothing when a prebuilt variant fits —
that install was two thirds of ``pip install``'s time. The copies are taken
from the build environment at sdist time (``get_requires_for_build_sdist``
asks for them), never committed.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path

from selector_backend.errors import InputError


def with_index_urls(pyproject_text: str, urls: tuple[str, ...]) -> str:
    if "[tool.hvd-selector]" in pyproject_text:
        raise InputError("pyproject.toml already has [tool.hvd-selector]; edit its index-url there instead")
    line = "index-url = " + json.dumps(list(urls))
    return pyproject_text.rstrip("\n") + f"\n\n[tool.hvd-selector]\n# embedded by build_sdist -C index-url\n{line}\n"


VENDORED = ("archspec", "packaging", "tomli")
# Empty, not a marker-only list: pip spawns a pip subprocess for any non-empty list.
SDIST_BUILD_REQUIRES = "requires = []  # archspec, packaging, tomli: selector_backend/_vendor"


def without_build_requires(pyproject_text: str) -> str:
    """The ``[build-system] requires`` line replaced by the sdist's (the vendored imports need none)."""
    text, count = re.subn(r"(?m)^requires = \[[^\]]*\]$", SDIST_BUILD_REQUIRES, pyproject_text, count=1)
    if count != 1:
        raise InputError("pyproject.toml: no one-line [build-system] requires = [...] to replace")
    return text


def vendored_files(names: tuple[str, ...] = VENDORED) -> dict[str, bytes]:
    """``_vendor/``-relative path -> bytes: each distribution's package and its licence files."""
    out: dict[str, bytes] = {}
    for name in names:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            parts = file.parts
            if parts[0] == name and file.suffix != ".pyc" and "__pycache__" not in parts:
                out[file.as_posix()] = Path(str(dist.locate_file(file))).read_bytes()
            elif parts[0].endswith(".dist-info") and ("LICENSE" in file.name.upper() or "COPYING" in file.name.upper()):
                out[f"LICENSES/{name}/{file.name}"] = Path(str(dist.locate_file(file))).read_bytes()
        if f"{name}/__init__.py" not in out:
            raise InputError(f"cannot vendor {name}: its installed files are not listed (reinstall {name})")
    return out


def finish_sdist(sdist: Path, urls: tuple[str, ...], *, vendor: bool = True) -> None:
    """Rewrite ``sdist`` in place (atomically): index URLs embedded, the backend's imports vendored."""
    with tarfile.open(sdist, "r:gz") as source:
        members = [(m, source.extractfile(m).read() if m.isfile() else None) for m in source.getmembers()]  # type: ignore[union-attr]
    top = members[0][0].name.split("/")[0]
    fd, tmp = tempfile.mkstemp(dir=sdist.parent, prefix=f".{sdist.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as out,
        ):
            for member, data in members:
                if member.name == f"{top}/pyproject.toml" and data is not None:
                    text = data.decode("utf-8")
                    text = with_index_urls(text, urls) if urls else text
                    data = (without_build_requires(text) if vendor else text).encode("utf-8")
                    member.size = len(data)
                out.addfile(member, io.BytesIO(data) if data is not None else None)
            template = members[0][0]
            for rel, blob in sorted(vendored_files().items()) if vendor else ():
                info = tarfile.TarInfo(f"{top}/selector_backend/_vendor/{rel}")
                info.size, info.mtime, info.mode = len(blob), template.mtime, 0o644
                out.addfile(info, io.BytesIO(blob))
        os.chmod(tmp, 0o644)  # an sdist is published as it is (mkstemp made it 0600)
        os.replace(tmp, sdist)
    finally:
        Path(tmp).unlink(missing_ok=True)
