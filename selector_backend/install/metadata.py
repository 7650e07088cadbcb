"""Static core metadata, identical for every variant (DESIGN.md contract).

``prepare_metadata_for_build_wheel`` answers from pyproject.toml alone, so pip
learns the dependencies without any build tool or download; the variant
lives only in variant.json, never in the name or the dependency list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector_backend.errors import InputError
from selector_backend.files.atomic import atomic_write_text


def _with_extra(requirement: str, extra: str) -> str:
    from selector_backend.vendored import import_module

    req = import_module("packaging.requirements").Requirement(requirement)
    marker = f'extra == "{extra}"'
    if req.marker is not None:
        marker = f"({req.marker}) and {marker}"
    req.marker = None
    return f"{req}; {marker}"


def core_metadata(pyproject: dict[str, Any], readme_text: str | None = None) -> str:
    project = pyproject.get("project")
    if not isinstance(project, dict) or "name" not in project or "version" not in project:
        raise InputError("pyproject.toml: [project] needs name and version")
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    if isinstance(project.get("license"), str):
        lines.append(f"License: {project['license']}")
    for classifier in project.get("classifiers", []):
        lines.append(f"Classifier: {classifier}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {_with_extra(dep, extra)}" for dep in deps]
    if readme_text is not None:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme_text
    return "\n".join(lines) + "\n"


def has_static_metadata(pyproject: dict[str, Any]) -> bool:
    """[project] gives name and version and computes nothing (no ``dynamic``): the metadata is pyproject's alone."""
    project = pyproject.get("project")
    return isinstance(project, dict) and "name" in project and "version" in project and not project.get("dynamic")


def copy_dist_info(wheel: Path, directory: Path) -> str:
    """The ``.dist-info`` of ``wheel`` (but RECORD) into ``directory``: the metadata of the very wheel pip will get."""
    from selector_backend.files.archives import open_zip

    with open_zip(wheel, error=InputError, what="wheel") as archive:  # bounded before the directory is parsed
        names = [n for n in archive.namelist() if n.split("/")[0].endswith(".dist-info")]
        if not names:
            raise InputError(f"{wheel.name}: no .dist-info directory")
        dist_info = names[0].split("/")[0]
        for name in names:
            if ".." in name.split("/") or name.startswith("/"):
                raise InputError(f"{wheel.name}: member {name!r} leaves its directory")
            if name.split("/")[0] == dist_info and not name.endswith("/RECORD") and not name.endswith("/"):
                target = directory / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    return dist_info


def write_dist_info(directory: Path, pyproject: dict[str, Any]) -> str:
    """Write ``{name}-{version}.dist-info`` with METADATA and entry points; return its name."""
    project = pyproject.get("project", {})
    name = str(project.get("name", "")).replace("-", "_")
    dist_info = f"{name}-{project.get('version')}.dist-info"
    readme = Path(str(project.get("readme", "README.md")))
    text = readme.read_text(encoding="utf-8") if readme.is_file() else None
    target = directory / dist_info
    atomic_write_text(target / "METADATA", core_metadata(pyproject, text))
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    body = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in groups.items() if eps
    )
    if body:
        atomic_write_text(target / "entry_points.txt", body)
    return dist_info
