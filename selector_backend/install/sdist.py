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
from collections.abc import Mapping
from pathlib import Path

from selector_backend.engine.project import ProjectConfig
from selector_backend.errors import ExternalError, InputError
from selector_backend.files.archives import read_tar
from selector_backend.vendored import VENDOR_PACKAGE, VENDORED


def with_index_urls(pyproject_text: str, urls: tuple[str, ...]) -> str:
    """``index-url`` written into ``[tool.hvd-selector]``: under the project's own table (its description,
    ``engine/project.py``) when there is one, else in a new table at the end."""
    line = "# embedded by build_sdist -C index-url\nindex-url = " + json.dumps(list(urls))
    header = re.search(r"(?m)^\[tool\.hvd-selector\][ \t]*(?:#.*)?$", pyproject_text)
    if header is None:
        return pyproject_text.rstrip("\n") + f"\n\n[tool.hvd-selector]\n{line}\n"
    body = pyproject_text[header.end() :]
    following = re.search(r"(?m)^\[", body)
    if re.search(r"(?m)^index-url\s*=", body[: following.start() if following else len(body)]):
        raise InputError("pyproject.toml already has [tool.hvd-selector] index-url; edit it there instead")
    return pyproject_text[: header.end()] + "\n" + line + pyproject_text[header.end() :]


#: What building the sdist needs: scikit-build-core makes it, and the three are copied into it
#: (tomli whatever the Python: the sdist serves Python 3.10 too).
SDIST_TOOLS = ("scikit-build-core>=0.10", "archspec>=0.2.5", "packaging>=22", "tomli>=1.1")

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


BACKEND_PATH = 'backend-path = ["."]  # selector_backend/ is carried in this sdist'


def carry_backend(project: ProjectConfig) -> dict[str, bytes]:
    """What another project's sdist carries besides its own files: this backend (``selector_backend/``, pure
    Python) and the project's catalog, so that ``pip install`` of the sdist needs no build requirement when a
    prebuilt fits (the backend-path line ``finish_sdist`` adds points pip at the copy)."""
    from selector_backend import PACKAGE_DIR

    out: dict[str, bytes] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR)
        if rel.parts[0] != "_vendor" and "__pycache__" not in rel.parts:
            out[f"selector_backend/{rel.as_posix()}"] = path.read_bytes()
    out[project.catalog_path.relative_to(project.root).as_posix()] = project.catalog_path.read_bytes()
    return out


def with_backend_path(pyproject_text: str) -> str:
    """``backend-path = ["."]`` under ``build-backend`` (a project that carries the backend in its sdist)."""
    if re.search(r"(?m)^backend-path\s*=", pyproject_text):
        return pyproject_text
    text, count = re.subn(
        r"(?m)^(build-backend\s*=.*)$", lambda m: f"{m.group(1)}\n{BACKEND_PATH}", pyproject_text, count=1
    )
    if count != 1:
        raise InputError("pyproject.toml: no build-backend line in [build-system]")
    return text


def source_date_epoch(default: int) -> int:
    """``SOURCE_DATE_EPOCH`` (reproducible-builds.org) if set, else ``default``."""
    text = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise InputError(f"SOURCE_DATE_EPOCH={text!r} is not a whole number of seconds; unset it or fix it")
    return int(text)


def _normalized(member: tarfile.TarInfo, mtime: int) -> tarfile.TarInfo:
    """``member`` with nothing of the building machine in it: owner root, no names, one mtime,
    mode 0755 for directories and executables, else 0644."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mtime = mtime
    member.mode = 0o755 if member.isdir() or member.mode & 0o111 else 0o644
    member.pax_headers = {}
    return member


def finish_sdist(
    sdist: Path, urls: tuple[str, ...], *, vendor: bool = True, carried: Mapping[str, bytes] | None = None
) -> None:
    """Rewrite ``sdist`` in place (atomically): index URLs embedded, the backend's imports vendored, and
    ``carried`` files (``carry_backend``) added or replacing the project's copies.

    Reproducible: the same tree gives the same bytes (sorted members, normalized owner and
    mode, one mtime from ``SOURCE_DATE_EPOCH`` or scikit-build-core's fixed epoch, and a gzip
    header with no file name), so re-publishing an unchanged release is a no-op."""
    carried = carried or {}
    members = read_tar(sdist, error=ExternalError)  # the sdist just built, read under the same bounds
    top = members[0][0].name.split("/")[0]
    mtime = source_date_epoch(int(members[0][0].mtime))
    members = [(m, d) for m, d in members if m.name.removeprefix(f"{top}/") not in carried]
    for i, (member, data) in enumerate(members):
        if member.name == f"{top}/pyproject.toml" and data is not None:
            text = data.decode("utf-8")
            text = with_index_urls(text, urls) if urls else text
            text = with_backend_path(text) if carried else text
            data = (without_build_requires(text) if vendor else text).encode("utf-8")
            member.size = len(data)
            members[i] = (member, data)
    for rel, blob in sorted(carried.items()):
        info = tarfile.TarInfo(f"{top}/{rel}")
        info.size = len(blob)
        members.append((info, blob))
    for rel, blob in sorted(vendored_files().items()) if vendor else ():
        info = tarfile.TarInfo(f"{top}/selector_backend/_vendor/{rel}")
        info.size = len(blob)
        members.append((info, blob))
    write_sdist(sdist, members, mtime)


def write_sdist(sdist: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mtime: int) -> None:
    """Write ``members`` as the gzipped tar ``sdist`` (atomically), reproducibly: sorted members, normalized
    owner and mode, one ``mtime``, and a gzip header with no file name."""
    fd, tmp = tempfile.mkstemp(dir=sdist.parent, prefix=f".{sdist.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=mtime) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as out,
        ):
            for member, data in sorted(members, key=lambda pair: pair[0].name):
                out.addfile(_normalized(member, mtime), io.BytesIO(data) if data is not None else None)
        os.chmod(tmp, 0o644)  # an sdist is published as it is (mkstemp made it 0600)
        os.replace(tmp, sdist)
    finally:
        Path(tmp).unlink(missing_ok=True)
