"""Embedding a default variant index into an sdist's pyproject.toml.

``python -m build --sdist -C index-url=URL`` makes an sdist whose backend
looks at URL unless the installing user configures another index: the
published sdist knows where its own prebuilt variants live, so stock
``pip install hvd-selector`` needs no extra flags.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from .errors import InputError


def with_index_urls(pyproject_text: str, urls: tuple[str, ...]) -> str:
    if "[tool.hvd-selector]" in pyproject_text:
        raise InputError("pyproject.toml already has [tool.hvd-selector]; edit its index-url there instead")
    line = "index-url = " + json.dumps(list(urls))
    return pyproject_text.rstrip("\n") + f"\n\n[tool.hvd-selector]\n# embedded by build_sdist -C index-url\n{line}\n"


def embed_index_urls(sdist: Path, urls: tuple[str, ...]) -> None:
    """Rewrite ``sdist`` in place (atomically) with the index URLs in its pyproject.toml."""
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
                    data = with_index_urls(data.decode("utf-8"), urls).encode("utf-8")
                    member.size = len(data)
                out.addfile(member, io.BytesIO(data) if data is not None else None)
        os.replace(tmp, sdist)
    finally:
        Path(tmp).unlink(missing_ok=True)
