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
- ``hvd-cli-help`` — ``hvd-selector COMMAND [SUB-COMMAND] --help``, one section each.
- ``hvd-project-keys`` — a project's ``[tool.hvd-selector]`` description (``engine/project.py``).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Mapping, Sequence
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


def project_key_rows() -> list[list[str]]:
    """[key, default, meaning] for each key of a project's description (ProjectConfig's fields)."""
    from selector_backend.engine import project
    from selector_backend.settings.docs import field_docs

    docs = field_docs(Path(project.__file__))
    rows = []
    for key in project.PROJECT_KEYS:
        default = key.default
        shown = "(required)" if key.name == "catalog" else "{}" if isinstance(default, Mapping) else repr(default)
        if isinstance(default, tuple):
            shown = "[" + ", ".join(f'"{v}"' for v in default) + "]"
        elif isinstance(default, str) and key.name != "catalog":
            shown = f'"{default}"' if default else "(see meaning)"
        rows.append([key.name, shown, docs[("ProjectConfig", key.attr)]])
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


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def cli_help() -> list[tuple[str, str]]:
    """(command, help text) for the top level, every command and every command's sub-commands
    (``spack spec``, ...), each command before its own, at a fixed width."""
    from selector_backend.cli import main as cli

    def walk(name: str, parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            parser.print_help()
        out = [(name, buffer.getvalue())]
        for sub, subparser in _subcommands(parser).items():
            out += walk(f"{name} {sub}", subparser)
        return out

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return walk("hvd-selector", cli.build_parser())
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ------------------------------------------------------------------ docutils
#: Where a long inline name may wrap: after these (HVD_SELECTOR_<wbr>INDEX_<wbr>URL, a.<wbr>b.<wbr>c).
NAME_BREAKS = re.compile(r"(?<=[._/])(?=[^._/])")
#: Shorter inline code never wraps inside itself.
LONG_NAME = 16


def _breakable_literal(text: str) -> nodes.literal:
    """Inline code a narrow column may wrap after a '.', '_' or '/', never inside a word or after a
    hyphen; ``<wbr>`` is not copied with the text, as a zero-width space would be."""
    node = nodes.literal(text)
    parts = NAME_BREAKS.split(text) if len(text) > LONG_NAME else [text]
    for i, part in enumerate(parts):
        if i:
            node += nodes.raw("", "<wbr>", format="html")
        node += nodes.Text(part)
    return node


def break_long_names(app: Any, doctree: nodes.document, docname: str) -> None:
    """Every long inline name of the prose (``selector_backend.engine.catalog.load_catalog``) gets the
    same break points, so a phone wraps it instead of pushing the page wider than the screen."""
    if app.builder.format != "html":
        return
    for literal in list(doctree.findall(nodes.literal)):
        plain = len(literal.children) == 1 and isinstance(literal.children[0], nodes.Text)
        if plain and len(literal.astext()) > LONG_NAME:
            replacement = _breakable_literal(literal.astext())
            literal.children = []
            for child in replacement.children:
                literal += child


def make_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], literal_columns: Sequence[int] = (), cards: bool = False
) -> nodes.table:
    """A docutils table; ``cards``: on a narrow window (_static/wide.css) each row becomes a card, each
    cell under its column's name (a label that is hidden in the table itself)."""
    table = nodes.table(classes=["hvd-generated", "colwidths-auto", *(["hvd-cards"] if cards else [])])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for _ in headers:
        group += nodes.colspec(colwidth=1)

    def row_node(cells: Sequence[str], literal: Sequence[int], labels: bool = False) -> nodes.row:
        row = nodes.row()
        for index, cell in enumerate(cells):
            entry = nodes.entry()
            para = nodes.paragraph()
            if labels:
                para += nodes.inline(text=f"{headers[index]}: ", classes=["hvd-label"])
            para += _breakable_literal(cell) if index in literal and cell else nodes.Text(cell)
            entry += para
            row += entry
        return row

    head = nodes.thead()
    head += row_node(headers, ())
    group += head
    body = nodes.tbody()
    for cells in rows:
        body += row_node(cells, literal_columns, labels=cards)
    group += body
    return table


class _TableDirective(Directive):
    has_content = False
    headers: Sequence[str] = ()
    literal: Sequence[int] = ()
    cards = False

    def rows(self) -> list[list[str]]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        return [make_table(self.headers, self.rows(), self.literal, self.cards)]


class SettingsTable(_TableDirective):
    headers = ("config file key", "environment variable", "-C / --config-setting", "default", "meaning")
    literal = (0, 1, 2)
    cards = True

    def rows(self) -> list[list[str]]:
        return settings_rows(host_facts=False)


class HostFactsTable(SettingsTable):
    def rows(self) -> list[list[str]]:
        return settings_rows(host_facts=True)


class ExtraEnvTable(_TableDirective):
    headers = ("environment variable", "meaning")
    literal = (0,)
    cards = True

    def rows(self) -> list[list[str]]:
        return extra_env_rows()


class ProjectKeysTable(_TableDirective):
    headers = ("[tool.hvd-selector] key", "default", "meaning")
    literal = (0, 1)
    cards = True

    def rows(self) -> list[list[str]]:
        return project_key_rows()


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
    """One section per command (``hvd-selector resolve``), its sub-commands as sections inside it."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        top: list[nodes.Node] = []
        parents: dict[str, nodes.section] = {}
        for command, text in cli_help():
            section = nodes.section(ids=[nodes.make_id(f"cli-{command}")], names=[nodes.fully_normalize_name(command)])
            title = nodes.title()
            title += nodes.literal(text=command)
            section += title
            section += nodes.literal_block(text, text, language="text")
            parent = parents.get(command.rsplit(" ", 1)[0]) if command.count(" ") > 1 else None
            if parent is not None:
                parent += section
            else:
                top.append(section)
            parents[command] = section
        return top


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
        ("hvd-project-keys", ProjectKeysTable),
    ):
        app.add_directive(name, directive)
    app.connect("doctree-resolved", break_long_names)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
