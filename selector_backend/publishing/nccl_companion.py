"""``hvd-selector-nccl``, made from the release's sdist: the distribution the ``[gpu-nvidia]`` extra pins.

It is an sdist only, so that every install runs its backend
(``install.nccl_companion``) on the installing host; a wheel would carry one
host's NCCL to every host. It carries, from hvd-selector's own sdist, what that
backend needs to make hvd-selector's plan: ``selector_backend/`` (with its
vendored imports, so it has no build requirements), the catalog, and the
``[tool.hvd-selector]`` table (the embedded ``index-url`` among it), plus the
requirements of hvd-selector's ``gpu-nvidia-cuNN`` extras, which it picks
from. A project whose extras do not name ``{name}-nccl`` gets none.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

from selector_backend.errors import InputError

PYPROJECT = """\
# {companion}: the NCCL wheel of the build {name} installs on this host ({name}[gpu-nvidia] pins it).
# Made from {name}'s sdist at release time (selector_backend/publishing/nccl_companion.py) and published as an
# sdist only: its backend computes the dependencies on each installing host (docs/guide/gpu-cluster.md).
[build-system]
requires = []
build-backend = "selector_backend.install.nccl_companion"
backend-path = ["."]

[project]
name = "{companion}"
version = "{version}"
description = "The NCCL wheel of the {name} build chosen for this host ({name}[gpu-nvidia])"
requires-python = {requires_python}
dynamic = ["dependencies"]

[tool.{table}]
# {name}'s extra per CUDA line, as its pyproject.toml gives them: the chosen build's line picks one
extras = {{ {extras} }}

{tool}"""


def companion_name(name: str) -> str:
    return f"{name}-nccl"


def _tool_section(text: str) -> str:
    """The ``[tool.hvd-selector]`` table (and its sub-tables) of a pyproject.toml, as written."""
    match = re.search(r"(?ms)^\[tool\.hvd-selector\]\s*$.*?(?=^\[(?!tool\.hvd-selector[.\]])|\Z)", text)
    if match is None:
        raise InputError("the sdist's pyproject.toml has no [tool.hvd-selector] table")
    return match.group(0).rstrip() + "\n"


def nccl_companion_sdist(sdist: Path, outdir: Path) -> Path | None:
    """``{name}-nccl``'s sdist made from the project's ``sdist`` into ``outdir``; None when the project's extras
    do not name it. The same sdist gives the same bytes (``install.sdist.write_sdist``)."""
    from selector_backend.engine.nccl_pairing import NCCL_WHEEL, line_extra
    from selector_backend.files.archives import read_tar
    from selector_backend.files.tomlfile import parse_toml
    from selector_backend.install.nccl_companion import TABLE
    from selector_backend.install.sdist import write_sdist
    from selector_backend.vendored import import_module

    members = read_tar(sdist, error=InputError)
    top = members[0][0].name.split("/")[0]
    files = {m.name.removeprefix(f"{top}/"): d for m, d in members if m.isfile() and d is not None}
    if "pyproject.toml" not in files:
        raise InputError(f"{sdist.name}: no pyproject.toml at its top")
    text = files["pyproject.toml"].decode("utf-8")
    data = parse_toml(Path(f"{sdist.name}:pyproject.toml"), text)
    project = data.get("project", {})
    if "name" not in project or "version" not in project:
        return None  # metadata written by setup.py (dynamic): no static extra can name the companion
    name, version = str(project["name"]), str(project["version"])
    companion = companion_name(name)
    optional = project.get("optional-dependencies", {})
    requirement = import_module("packaging.requirements").Requirement
    utils = import_module("packaging.utils")
    named = {utils.canonicalize_name(requirement(r).name) for reqs in optional.values() for r in reqs}
    if utils.canonicalize_name(companion) not in named:
        return None
    catalog = str(data["tool"]["hvd-selector"]["catalog"])
    extras = ", ".join(
        f"{json.dumps(line_extra(line))} = {json.dumps(optional.get(line_extra(line), []))}" for line in NCCL_WHEEL
    )
    pyproject = PYPROJECT.format(
        companion=companion,
        name=name,
        version=version,
        requires_python=json.dumps(str(project.get("requires-python", ">=3.10"))),
        table=TABLE,
        extras=extras,
        tool=_tool_section(text),
    )
    pkg_info = (
        f"Metadata-Version: 2.2\nName: {companion}\nVersion: {version}\n"
        f"Requires-Python: {project.get('requires-python', '>=3.10')}\nDynamic: Requires-Dist\n"
    )
    kept = {rel: blob for rel, blob in files.items() if rel.startswith("selector_backend/") or rel == catalog}
    kept.update({"pyproject.toml": pyproject.encode("utf-8"), "PKG-INFO": pkg_info.encode("utf-8")})
    new_top = f"{utils.canonicalize_name(companion).replace('-', '_')}-{version}"
    out: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for rel, blob in kept.items():
        info = tarfile.TarInfo(f"{new_top}/{rel}")
        info.size = len(blob)
        out.append((info, blob))
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / f"{new_top}.tar.gz"
    write_sdist(target, out, int(members[0][0].mtime))
    return target
