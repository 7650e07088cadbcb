"""The package map the Architecture page describes, checked: what each audience may import, and
that the project's imports run in no circle."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "selector_backend"
ARCHITECTURE_PAGE = ROOT / "docs" / "project" / "architecture.md"
PROJECT_PACKAGES = ("selector_backend", "hvd_selector", "devtools")


def table(header: str) -> list[list[str]]:
    """The cells of each row of the Architecture page's table whose header line is ``header``."""
    lines = ARCHITECTURE_PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


MAP_HEADER = "| package | audience | owns | may import |"
SUBPACKAGES = tuple(row[0].strip("`/") for row in table(MAP_HEADER))  # the page's rows, not a second list


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_subpackage_says_what_it_owns(name: str) -> None:
    module = importlib.import_module(f"selector_backend.{name}")
    assert module.__doc__ and len(module.__doc__.split()) >= 8, f"{name}: its docstring says what it owns"
    exported = set(getattr(module, "__all__", ()))
    assert exported, f"selector_backend.{name} has no __all__"
    modules = {p.stem for p in (PACKAGE / name).glob("*.py") if not p.stem.startswith("_")}
    modules |= {p.name for p in (PACKAGE / name).iterdir() if (p / "__init__.py").is_file()}
    if name not in ("detect", "settings"):  # these export their entry points (host_profile_for, load_settings, ...)
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


class Import(NamedTuple):
    """One project module naming a module in an import statement."""

    importer: str
    target: str  # a project module, or as written for any other
    where: str  # path:line
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs
    project: bool  # the target is one of the project's modules


@functools.cache
def project_modules() -> dict[str, Path]:
    """Every module of the project's packages by dotted name; a ``.pyi`` stands for a compiled module."""
    modules: dict[str, Path] = {}
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py*")):
            if path.suffix in (".py", ".pyi"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                modules.setdefault(".".join(parts[:-1] if parts[-1] == "__init__" else parts), path)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@functools.cache
def project_imports() -> tuple[Import, ...]:
    """Every import in a project module, wherever the statement stands: at module level, in a
    function (a lazy import runs when the function does) or under ``TYPE_CHECKING``.

    ``from a.b import c`` names the module ``a.b.c`` if there is one, else ``a.b``. Importing a
    module first runs the packages above it; those the importer is not itself inside count as
    imported too (its own are already running: a package that imports its modules is no circle).
    """
    modules = project_modules()
    found = []
    for name, path in modules.items():
        if path.suffix != ".py":
            continue
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typed = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and _is_type_checking(block.test)
            for statement in block.body
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*package, base] if base else package)
                named = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            for written in named:
                dotted = written
                while dotted and dotted not in modules:
                    dotted = dotted.rpartition(".")[0]
                if not dotted:
                    found.append(Import(name, written, where, id(node) in typed, False))
                parts = dotted.split(".")
                for depth in range(1, len(parts) + 1):
                    target = ".".join(parts[:depth])
                    if target and target != name and not name.startswith(target + "."):
                        found.append(Import(name, target, where, id(node) in typed, True))
    return tuple(found)


def test_the_project_imports_in_no_circle() -> None:
    """Each circle of imports is named with the line of each of its imports; none is allowed."""
    graph = nx.DiGraph()
    for item in project_imports():
        if item.project:
            graph.add_edge(item.importer, item.target, where=item.where)
    circles = []
    for component in sorted(map(sorted, nx.strongly_connected_components(graph))):
        if len(component) > 1:
            edges = nx.find_cycle(graph.subgraph(component), source=component[0])
            circles.append(" -> ".join([edges[0][0], *(f"{b} ({graph.edges[a, b]['where']})" for a, b in edges)]))
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_backend_takes_archspec_packaging_and_tomli_from_vendored() -> None:
    """Whatever pip's build process can import runs from the sdist with nothing installed, so it takes
    the three through ``selector_backend.vendored`` (the sdist's copies), never by their own names."""
    from selector_backend.vendored import VENDORED

    runs = [item for item in project_imports() if not item.type_only]
    graph = nx.DiGraph((item.importer, item.target) for item in runs if item.project)
    backend = "selector_backend.install.backend"
    reached = {backend, *nx.descendants(graph, backend)}
    direct = [
        f"{item.where} imports {item.target}"
        for item in runs
        if item.importer in reached and not item.project and item.target.split(".")[0] in VENDORED
    ]
    assert not direct, "import these through selector_backend.vendored.import_module:\n" + "\n".join(direct)


def _room(module: str) -> str:
    """The part of the package map a selector_backend module belongs to: its subpackage or
    top-level module, or ``PACKAGE_DIR`` for the package itself (which holds only that)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "PACKAGE_DIR"


@functools.cache
def package_map() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """package -> (what it may import, what it may import for types only), read from the package map
    table of the Architecture page: its one statement of the rule."""
    rules: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for package, _, _, may in table(MAP_HEADER):
        name = package.strip("`/")
        if may == "everything":
            continue
        items = [] if may == "nothing" else re.findall(r"`([\w.]+)`( \([^)]*\))?", may)
        assert may == "nothing" or items, f"{ARCHITECTURE_PAGE.name}: {name}: cannot read {may!r}"
        allowed = frozenset(item for item, note in items if "types only" not in note)
        rules[name] = (allowed, frozenset(item for item, note in items if "types only" in note))
    return rules


def test_the_package_map_names_every_package() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    listed = set(SUBPACKAGES)
    assert packages == listed, (
        f"{ARCHITECTURE_PAGE.name}: the package map lacks {sorted(packages - listed)}, "
        f"names no package {sorted(listed - packages)}"
    )


@pytest.mark.parametrize("package", sorted(package_map()))
def test_each_audience_imports_only_what_the_map_allows(package: str) -> None:
    allowed, types_only = package_map()[package]
    for item in project_imports():
        if not (
            item.project
            and item.importer.startswith("selector_backend.")
            and item.target.split(".")[0] == "selector_backend"
        ):
            continue
        room = _room(item.target)
        if _room(item.importer) == package and room not in {package, *allowed}:
            assert item.type_only and room in types_only, (
                f"{item.where} imports {item.target}: {package} may not import {room} ({ARCHITECTURE_PAGE.name})"
            )


def _page_path(written: str) -> Path | None:
    """A path as the Architecture page writes it: from the repository root, else inside ``selector_backend``."""
    for base in (ROOT, PACKAGE):
        if (base / written).exists():
            return base / written
    return None


def _defines(path: Path, dotted: str) -> bool:
    """Does ``path`` define ``dotted`` (``name`` or ``Class.member``)? Python by its syntax tree, else by its text."""
    if path.suffix != ".py":
        return re.search(rf"\b{re.escape(dotted.rpartition('.')[2])}\b", path.read_text(encoding="utf-8")) is not None
    body: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for part in dotted.split("."):
        for node in body:
            names = (
                [node.name]
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                else [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if type(t) is ast.Name]
            )
            if part in names:
                body = node.body if isinstance(node, ast.ClassDef) else []
                break
        else:
            return False
    return True


RULES_HEADER = "| rule | one place |"


@pytest.mark.parametrize("rule", [row[0] for row in table(RULES_HEADER)])
def test_each_rule_lives_where_the_page_says(rule: str) -> None:
    """'Where each rule lives' names a file and, after it, what in that file holds the rule: both exist."""
    place = dict((row[0], row[1]) for row in table(RULES_HEADER))[rule]
    written, *names = re.findall(r"`([^`]+)`", place)
    path = _page_path(written)
    assert path is not None, f"{ARCHITECTURE_PAGE.name}: {rule!r} lives in {written}, which does not exist"
    for name in names:
        if re.fullmatch(r"[A-Za-z_][\w.]*", name) and "/" not in name:
            assert _defines(path, name), f"{ARCHITECTURE_PAGE.name}: {rule!r}: {written} defines no {name}"


def test_the_data_flow_names_files_that_exist() -> None:
    """Every Python file the page names (the data flow from ``pip install`` and the prose) exists."""
    text = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    named = sorted(set(re.findall(r"(?<![\w./])((?:[\w]+/)+[\w]+\.py)\b", text)))
    assert len(named) >= 10, named  # the reader works: the diagram alone names more
    missing = [name for name in named if _page_path(name) is None]
    assert not missing, f"{ARCHITECTURE_PAGE.name} names files that do not exist: {missing}"


def test_the_runtime_imports_only_what_the_page_says() -> None:
    """``hvd_selector`` takes from ``selector_backend`` only ``jobs`` and two engine modules that import
    nothing else (the page's paragraph on the runtime), so ``import hvd_selector`` stays light."""
    allowed = ("selector_backend.jobs", "selector_backend.engine.runtime", "selector_backend.engine.reinstall")
    stray = [
        f"{item.where} imports {item.target}"
        for item in project_imports()
        if item.project
        and item.importer.split(".")[0] == "hvd_selector"
        and item.target.startswith("selector_backend.")
        and item.target != "selector_backend.engine"  # the package above runtime and reinstall
        and not item.target.startswith(allowed)
    ]
    assert not stray, "hvd_selector imports beyond jobs, engine.runtime, engine.reinstall:\n" + "\n".join(stray)
