"""Docs tables generated from the code, so the docs cannot drift from it.

One model feeds the docs: the settings tables come from the settings model
(``selector_backend.settings.model``: each field, its names, default and the
doc string under it), the catalog tables from
``load_catalog()``, the command reference from the real argparse parsers.
The ``*_rows`` functions are plain data so tests can check them without Sphinx.

Directives (MyST: ```` ```{hvd-settings} ````):

- ``hvd-settings`` — every setting: config key, environment variable, ``-C`` key, default, meaning.
- ``hvd-host-facts`` — the host-fact overrides (``[host]`` table, env, ``-C``).
- ``hvd-extra-env`` — environment variables that are not settings (debugging, detection).
- ``hvd-catalog-axes``, ``hvd-catalog-cuda-lines``, ``hvd-catalog-constraints``,
  ``hvd-catalog-requirements``, ``hvd-catalog-prebuilt`` — the variant catalog.
- ``hvd-cli-help`` — ``hvd-selector COMMAND --help`` for every command.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------ rows (plain data)
def settings_rows(host_facts: bool = False) -> list[list[str]]:
    """[config key, env var, -C key, default, meaning] for each setting (or each host fact)."""
    from selector_backend.settings.docs import default_text, documented_options

    rows = []
    for doc in documented_options():
        option = doc.option
        if option.host_fact != host_facts:
            continue
        key = f"[host] {option.name}" if option.host_fact else option.name
        rows.append([key, option.env, f"-C {option.name}=…", default_text(option), doc.help])
    return rows


def extra_env_rows() -> list[list[str]]:
    """HVD_SELECTOR_* variables that are not settings (debugging, detection, the launcher)."""
    from selector_backend.settings import OTHER_ENV

    return [[name, meaning] for name, meaning in OTHER_ENV.items()]


def _catalog() -> Any:
    from selector_backend.engine.catalog import load_catalog

    return load_catalog()


def axes_rows() -> list[list[str]]:
    catalog = _catalog()
    rows = []
    for axis in catalog.axes.values():
        default = ",".join(axis.default) if isinstance(axis.default, tuple) else axis.default
        rows.append([axis.name, axis.kind, ", ".join(axis.values), default, axis.cmake, axis.description])
    return rows


def cuda_line_rows() -> list[list[str]]:
    return [[line.name, line.toolkit, ", ".join(line.archs)] for line in _catalog().cuda_lines.values()]


def constraint_rows() -> list[list[str]]:
    def text(parts: Any) -> str:
        return "; ".join(f"{axis} ∈ {{{', '.join(sorted(vals))}}}" for axis, vals in parts.items())

    rows = []
    for c in _catalog().constraints:
        rule = " ".join(
            f"{word} {text(part)}"
            for word, part in (("require", c.require), ("include", c.include), ("forbid", c.forbid))
            if part
        )
        rows.append([text(c.when), rule, c.message])
    return rows


def requirement_rows() -> list[list[str]]:
    return [[f"{axis}={value}", ", ".join(caps)] for (axis, value), caps in _catalog().host_requirements.items()]


def prebuilt_rows() -> list[list[str]]:
    from selector_backend.engine.variant import variant_label

    catalog = _catalog()
    rows = []
    for entry in catalog.prebuilt:
        for variant in entry.variants:
            cells = [entry.name]
            for axis in catalog.axes:
                value = variant[axis]
                cells.append(",".join(value) if isinstance(value, tuple) else str(value))
            cells.append(variant_label(variant))
            rows.append(cells)
    return rows


def prebuilt_headers() -> list[str]:
    return ["entry", *_catalog().axes, "label"]


def cli_help() -> list[tuple[str, str]]:
    """(command, help text) for the top level and every subcommand, at a fixed width."""
    from selector_backend.cli import main as cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = cli.build_parser()
        out = [("hvd-selector", parser.format_help())]
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, subparser in sub.choices.items():
            buffer = io.StringIO()
            with redirect_stdout(buffer):
                subparser.print_help()
            out.append((f"hvd-selector {name}", buffer.getvalue()))
        return out
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ------------------------------------------------------------------ docutils
def make_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], literal_columns: Sequence[int] = ()
) -> nodes.table:
    table = nodes.table(classes=["hvd-generated"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for _ in headers:
        group += nodes.colspec(colwidth=1)

    def row_node(cells: Sequence[str], literal: Sequence[int]) -> nodes.row:
        row = nodes.row()
        for index, cell in enumerate(cells):
            entry = nodes.entry()
            para = nodes.paragraph()
            para += nodes.literal(text=cell) if index in literal and cell else nodes.Text(cell)
            entry += para
            row += entry
        return row

    head = nodes.thead()
    head += row_node(headers, ())
    group += head
    body = nodes.tbody()
    for cells in rows:
        body += row_node(cells, literal_columns)
    group += body
    return table


class _TableDirective(Directive):
    has_content = False
    headers: Sequence[str] = ()
    literal: Sequence[int] = ()

    def rows(self) -> list[list[str]]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        return [make_table(self.headers, self.rows(), self.literal)]


class SettingsTable(_TableDirective):
    headers = ("config file key", "environment variable", "-C / --config-setting", "default", "meaning")
    literal = (0, 1, 2)

    def rows(self) -> list[list[str]]:
        return settings_rows(host_facts=False)


class HostFactsTable(SettingsTable):
    def rows(self) -> list[list[str]]:
        return settings_rows(host_facts=True)


class ExtraEnvTable(_TableDirective):
    headers = ("environment variable", "meaning")
    literal = (0,)

    def rows(self) -> list[list[str]]:
        return extra_env_rows()


class AxesTable(_TableDirective):
    headers = ("axis", "kind", "values", "default", "CMake variable", "meaning")
    literal = (0, 4)

    def rows(self) -> list[list[str]]:
        return axes_rows()


class CudaLinesTable(_TableDirective):
    headers = ("cuda", "toolkit (minimum driver CUDA)", "cuda_arch it can build")
    literal = (0,)

    def rows(self) -> list[list[str]]:
        return cuda_line_rows()


class ConstraintsTable(_TableDirective):
    headers = ("when", "then", "message")

    def rows(self) -> list[list[str]]:
        return constraint_rows()


class RequirementsTable(_TableDirective):
    headers = ("value", "needs on the host")
    literal = (0,)

    def rows(self) -> list[list[str]]:
        return requirement_rows()


class PrebuiltTable(_TableDirective):
    literal = (0,)

    def run(self) -> list[nodes.Node]:
        return [make_table(prebuilt_headers(), prebuilt_rows(), self.literal)]


class CliHelp(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for command, text in cli_help():
            out.append(nodes.rubric(text=command, ids=[nodes.make_id(f"cli-{command}")]))
            out.append(nodes.literal_block(text, text, language="text"))
        return out


def setup(app: Any) -> dict[str, Any]:
    for name, directive in (
        ("hvd-settings", SettingsTable),
        ("hvd-host-facts", HostFactsTable),
        ("hvd-extra-env", ExtraEnvTable),
        ("hvd-catalog-axes", AxesTable),
        ("hvd-catalog-cuda-lines", CudaLinesTable),
        ("hvd-catalog-constraints", ConstraintsTable),
        ("hvd-catalog-requirements", RequirementsTable),
        ("hvd-catalog-prebuilt", PrebuiltTable),
        ("hvd-cli-help", CliHelp),
    ):
        app.add_directive(name, directive)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
