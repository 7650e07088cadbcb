"""Each knob's documentation, read from the string under its field in ``model.py``.

Used by the docs tables (docs/_ext/hvd_tables.py) and their tests, never on
the install path: it parses the model's source with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

from selector_backend.settings import model


class Documented(NamedTuple):
    option: model.Option
    help: str

    @property
    def name(self) -> str:
        return self.option.name

    @property
    def env(self) -> str:
        return self.option.env

    @property
    def host_fact(self) -> bool:
        return self.option.host_fact


def field_docs(source: Path | None = None) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the string literal that follows the field, in ``source`` (default: the
    settings model; ``engine/project.py``'s ProjectConfig is documented the same way)."""
    tree = ast.parse((source or Path(model.__file__)).read_text(encoding="utf-8"))
    out: dict[tuple[str, str], str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for field, doc in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                out[(node.name, field.target.id)] = " ".join(doc.value.value.split())
    return out


def documented_options() -> list[Documented]:
    """Every knob of ``model.OPTIONS`` with its doc string (a knob without one is a bug)."""
    docs = field_docs()
    out = []
    for option in model.OPTIONS:
        owner = "HostFacts" if option.host_fact else "Settings"
        out.append(Documented(option, docs[(owner, option.attr)]))
    return out


def default_text(option: model.Option) -> str:
    """The default as the docs show it."""
    from selector_backend.settings.show import value_text

    if option.default_text is not None:
        return option.default_text
    if option.default is None and option.host_fact:
        return "detected"
    return value_text(option, option.default)
