"""The package map the Architecture page describes, checked: what each audience may import."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "selector_backend"
SUBPACKAGES = ("engine", "files", "detect", "install", "publishing", "interop", "cli", "jobs")


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_subpackage_says_what_it_owns(name: str) -> None:
    module = importlib.import_module(f"selector_backend.{name}")
    assert module.__doc__ and len(module.__doc__.split()) >= 8, f"{name}: its docstring says what it owns"
    exported = set(getattr(module, "__all__", ()))
    assert exported, f"selector_backend.{name} has no __all__"
    modules = {p.stem for p in (PACKAGE / name).glob("*.py") if not p.stem.startswith("_")}
    modules |= {p.name for p in (PACKAGE / name).iterdir() if (p / "__init__.py").is_file()}
    if name != "detect":  # detect exports its one entry point, detect_host
        assert exported == modules, f"selector_backend.{name}.__all__ lists its modules: {sorted(modules)}"


def test_the_launcher_loads_without_the_runtime() -> None:
    """``hvd-selector run`` on a login node: the installed build's guard and native core stay unloaded."""
    code = (
        "import sys; from selector_backend.cli.commands import run; from selector_backend.jobs import launcher; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'hvd_selector'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_a_command_module_that_fails_to_import_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from selector_backend.cli import main

    monkeypatch.setattr(main, "COMMAND_MODULES", (*main.COMMAND_MODULES, "no_such_command"))
    with pytest.raises(ModuleNotFoundError, match="no_such_command"):
        main.build_parser(None)


def _imports(path: Path) -> set[str]:
    """selector_backend subpackages (or top-level modules) a module imports, lazily or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "selector_backend" and len(parts) > 1:
                found.add(parts[1])
            elif parts == ["selector_backend"] and isinstance(node, ast.ImportFrom):
                found.update(a.name for a in node.names)
    return found


#: What each audience may import (the table on docs/project/architecture.md); ``TYPE_CHECKING``
#: imports count too, except settings in the engine (``select`` is typed by the model it is given).
MAY_IMPORT = {
    "engine": {"errors", "records", "files", "PACKAGE_DIR"},
    "files": {"errors", "records"},
    "settings": {"engine", "files", "detect", "errors", "records", "install"},
    "detect": {"engine", "settings", "errors", "records", "files"},
    "install": {"engine", "settings", "files", "detect", "errors", "records", "PACKAGE_DIR"},
    "publishing": {"engine", "install", "settings", "files", "detect", "errors", "records", "PACKAGE_DIR"},
    "interop": {"engine", "settings", "files", "detect", "errors", "records", "PACKAGE_DIR"},
    "jobs": set(),
}
TYPE_ONLY = {"engine": {"settings"}}


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_audience_imports_only_what_the_map_allows(package: str) -> None:
    for path in sorted((PACKAGE / package).rglob("*.py")):
        extra = _imports(path) - MAY_IMPORT[package] - {package} - TYPE_ONLY.get(package, set())
        assert not extra, f"{path.relative_to(PACKAGE.parent)} imports selector_backend.{sorted(extra)}"
