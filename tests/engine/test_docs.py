"""The docs' generated tables cover every setting, variable and catalog entry, and the
engine pages build without warnings."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.settings import OTHER_ENV
from selector_backend.settings.docs import documented_options

from .engine_helpers import ROOT

OPTIONS = documented_options()


def _sphinx_extension(name: str) -> ModuleType:
    """docs/_ext/<name>.py, loaded from its file as Sphinx loads it (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "_ext" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hvd_tables = _sphinx_extension("hvd_tables")

ENGINE_PAGES = [
    "index.md",
    "guide/install.md",
    "guide/selectors.md",
    "guide/overrides.md",
    "guide/docker.md",
    "guide/troubleshooting.md",
    "reference/cli.md",
    "reference/environment.md",
    "reference/config-file.md",
    "reference/host-profile.md",
    "reference/exit-codes.md",
    "reference/catalog.md",
]


def test_settings_tables_mention_every_option() -> None:
    rows = hvd_tables.settings_rows(False) + hvd_tables.settings_rows(True)
    text = "\n".join(" | ".join(r) for r in rows)
    for option in OPTIONS:
        assert option.env in text
        assert f"-C {option.name}=" in text
        assert option.help in text
    host_keys = {r[0] for r in hvd_tables.settings_rows(True)}
    assert host_keys == {f"[host] {o.name}" for o in OPTIONS if o.host_fact}


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    documented = {o.env for o in OPTIONS} | {r[0] for r in hvd_tables.extra_env_rows()} | {"HVD_SELECTOR"}
    assert set(OTHER_ENV) <= documented
    used: set[str] = set()
    for package in ("selector_backend", "hvd_selector"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            used |= set(re.findall(r"\bHVD_SELECTOR_[A-Z][A-Z0-9_]*[A-Z0-9]\b", text))
            used |= {"HVD_SELECTOR_" + m for m in re.findall(r'ENV_PREFIX \+ "([A-Z_]+)"', text)}
    missing = sorted(used - documented)
    assert not missing, f"read by the code but not documented (add to settings.OTHER_ENV): {missing}"


def test_catalog_tables_cover_the_catalog() -> None:
    catalog = load_catalog()
    assert [r[0] for r in hvd_tables.axes_rows()] == list(catalog.axes)
    assert [r[0] for r in hvd_tables.cuda_line_rows()] == list(catalog.cuda_lines)
    assert len(hvd_tables.constraint_rows()) == len(catalog.constraints)
    assert len(hvd_tables.requirement_rows()) == len(catalog.host_requirements)
    prebuilt = hvd_tables.prebuilt_rows()
    assert len(prebuilt) == sum(len(e.variants) for e in catalog.prebuilt)
    headers = hvd_tables.prebuilt_headers()
    for row, variant in zip(prebuilt, [v for e in catalog.prebuilt for v in e.variants], strict=True):
        spec = " ".join(f"{axis}={row[headers.index(axis)]}" for axis in catalog.axes)
        assert catalog.parse_variant(spec) == variant


def test_cli_help_covers_every_command() -> None:
    from selector_backend.cli import main as cli

    helps = dict(hvd_tables.cli_help())
    loaded = [m.NAME for m in cli._load_commands()]
    assert {"detect", "resolve"} <= set(loaded)
    for name in loaded:
        assert f"hvd-selector {name}" in helps
        assert "usage: hvd-selector" in helps[f"hvd-selector {name}"]
    for sub in ("spec", "parse", "pick", "package"):  # a command's sub-commands have their own help
        assert f"usage: hvd-selector spack {sub}" in helps[f"hvd-selector spack {sub}"]


@pytest.fixture(scope="module")
def built_docs() -> tuple[Path, list[str]]:
    pytest.importorskip("myst_parser")
    from devtools.docs_build import built_docs

    return built_docs()


def test_engine_pages_build_without_warnings(built_docs: tuple[Path, list[str]]) -> None:
    """Warnings from pages other engineers own are theirs; CI builds the whole site with -W."""
    _, warnings = built_docs
    docs = ROOT / "docs"
    ours = [
        w
        for w in warnings
        if any(w.startswith(str(docs / page)) for page in ENGINE_PAGES) or "hvd_tables" in w or "conf.py" in w
    ]
    assert not ours, "\n".join(ours)


def test_generated_tables_reach_the_html(built_docs: tuple[Path, list[str]]) -> None:
    html, _ = built_docs

    def text(page: str) -> str:  # the words a reader sees (a long name has <wbr> break points)
        return re.sub(r"<[^>]+>", "", (html / "reference" / page).read_text(encoding="utf-8"))

    environment = text("environment.html")
    config = text("config-file.html")
    for option in OPTIONS:
        assert option.env in environment
        assert option.name in config
    for name in OTHER_ENV:
        assert name in environment
    catalog_page = text("catalog.html")
    from selector_backend.engine.variant import variant_label

    for variant in load_catalog().prebuilt_variants():
        assert variant_label(variant) in catalog_page
    cli_page = text("cli.html")
    assert "--require-prebuilt" in cli_page and "usage: hvd-selector resolve" in cli_page
