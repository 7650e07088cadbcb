"""What a project adopting the backend writes (python-xxhash's case, docs/guide/own-project.md), shared by the
end-to-end test (test_own_project.py) and the tests of each generated piece that need no build."""

from __future__ import annotations

from pathlib import Path

#: All the adopting project writes: its catalog ...
CATALOG = """\
[package]
name = "xxhash"
version = "3.5.0"

[axes.target]
values = ["x86_64", "x86_64_v2", "x86_64_v3"]

[[prebuilt]]
name = "cpu"
target = ["x86_64", "x86_64_v2", "x86_64_v3"]
"""
#: ... and its pyproject.toml: the backend line replaced, the table naming the catalog added.
BACKEND_LINE = ('build-backend = "setuptools.build_meta"', 'build-backend = "selector_backend.install.backend"')
TABLE = '\n[tool.hvd-selector]\ncatalog = "variants.toml"\n'


def bare_project(root: Path, table: str = TABLE) -> Path:
    """A source tree with the adopter's catalog and pyproject table only (no code: for what needs no build)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "variants.toml").write_text(CATALOG)
    pyproject = '[project]\nname = "xxhash"\nversion = "3.5.0"\n\n[build-system]\nrequires = ["setuptools>=45"]\n'
    (root / "pyproject.toml").write_text(pyproject + BACKEND_LINE[1] + "\n" + table)
    return root
