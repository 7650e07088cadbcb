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
asks for them), never committed, and their imports of each other are
rewritten to ``selector_backend._vendor`` as they are copied, the way pip
vendors: nobody's ``sys.path`` changes (``selector_backend.vendored``).
"""

from __future__ import annotations

import ast
import gzip
import importlib.metadata
import io
import itertools
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path

from selector_backend.errors import InputError
from selector_backend.vendored import VENDOR_PACKAGE, VENDORED


def with_index_urls(pyproject_text: str, urls: tuple[str, ...]) -> str:
    if "[tool.hvd-selector]" in pyproject_text:
        raise InputError("pyproject.toml already has [tool.hvd-selector]; edit its index-url there instead")
    line = "index-url = " + json.dumps(list(urls))
    return pyproject_text.rstrip("\n") + f"\n\n[tool.hvd-selector]\n# embedded by build_sdist -C index-url\n{line}\n"


# Empty, not a marker-only list: pip spawns a pip subprocess for any non-empty list.
SDIST_BUILD_REQUIRES = "requires = []  # archspec, packaging, tomli: selector_backend/_vendor"


def without_build_requires(pyproject_text: str) -> str:
    """The ``[build-system] requires`` line replaced by the sdist's (the vendored imports need none)."""
    text, count = re.subn(r"(?m)^requires = \[[^\]]*\]$", SDIST_BUILD_REQUIRES, pyproject_text, count=1)
    if count != 1:
        raise InputError("pyproject.toml: no one-line [build-system] requires = [...] to replace")
    return text


NATIVE_SUFFIXES = (".so", ".pyd", ".dylib")  # a compiled copy (mypyc's tomli) stays behind: its .py is carried
VENDOR_INIT = b'"""archspec, packaging and tomli for the backend of this sdist (selector_backend/vendored.py)."""\n'


def vendored_files(names: tuple[str, ...] = VENDORED) -> dict[str, bytes]:
    """``_vendor/``-relative path -> bytes: each distribution's pure-Python package, its imports
    rewritten (``rewrite_imports``), and its licence files."""
    out: dict[str, bytes] = {"__init__.py": VENDOR_INIT}
    for name in names:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            parts = file.parts
            if parts[0] == name and file.suffix not in (".pyc", *NATIVE_SUFFIXES) and "__pycache__" not in parts:
                data = Path(str(dist.locate_file(file))).read_bytes()
                out[file.as_posix()] = rewrite_imports(data, names) if file.suffix == ".py" else data
            elif parts[0].endswith(".dist-info") and ("LICENSE" in file.name.upper() or "COPYING" in file.name.upper()):
                out[f"LICENSES/{name}/{file.name}"] = Path(str(dist.locate_file(file))).read_bytes()
        if f"{name}/__init__.py" not in out:
            raise InputError(f"cannot vendor {name}: its installed files are not listed (reinstall {name})")
    return out


def rewrite_imports(source: bytes, names: tuple[str, ...] = VENDORED, package: str = VENDOR_PACKAGE) -> bytes:
    """``source`` with every absolute import of ``names`` pointed at ``package`` (``selector_backend._vendor``;
    the variant provider's engine copy names its own); each statement binds the same names as before
    (``import packaging.version`` still binds ``packaging``)."""
    starts = [0, *itertools.accumulate(len(line) for line in source.splitlines(keepends=True))]  # of each line
    edits: list[tuple[int, int, str]] = []  # (first byte, byte after, the statement that replaces them)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in names:
            aliases = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
            text = f"from {package}.{node.module} import {aliases}"
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in names for a in node.names):
            text = "; ".join(_import(a, names, package) for a in node.names)
        else:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None  # set by ast.parse
        # ast's columns count UTF-8 bytes, as these offsets do
        edits.append(
            (starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset, text)
        )
    for begin, end, text in sorted(edits, reverse=True):
        source = source[:begin] + text.encode() + source[end:]
    return source


def _import(alias: ast.alias, names: tuple[str, ...], package: str) -> str:
    """One name of an ``import`` statement, as a statement that binds what it bound."""
    top, _, rest = alias.name.partition(".")
    if top not in names:
        return f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
    if alias.asname:  # import a.b as c: binds c to a.b
        return f"import {package}.{alias.name} as {alias.asname}"
    if not rest:  # import a: binds a
        return f"from {package} import {top}"
    # import a.b: binds a, with a.b loaded
    return f'from {package} import {top}; __import__("{package}.{alias.name}")'


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
