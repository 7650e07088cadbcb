"""A command's options declared once, as data: added to an argparse parser, or read without argparse.

argparse (and ``gettext``, which it imports) is about 11 M instructions of a cold ``resolve --json``,
more than the ranking itself. A command that declares its options here (``ARGUMENTS``) is parsed by
``parse_simple`` when its command line is in the plain shape a program writes: every flag spelled out,
every value after its flag. Anything else (``--help``, an abbreviation, an unknown option, two options
of one exclusive group, a value argparse would refuse or read otherwise) is left to argparse, built from
the same declarations, which then says what argparse always said.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

# The add_argument keywords and actions the plain reading knows; an argument using any other is left to argparse.
SIMPLE_KEYWORDS = frozenset({"action", "default", "dest", "help", "metavar", "type"})
SIMPLE_ACTIONS = frozenset({"store", "store_true", "append"})


class Argument:
    """One ``add_argument`` call: its flags and keywords, and the mutually exclusive group it belongs to."""

    __slots__ = ("flags", "group", "keywords")

    def __init__(self, *flags: str, group: str | None = None, **keywords: Any) -> None:
        self.flags = flags
        self.keywords = keywords
        self.group = group

    @property
    def dest(self) -> str:
        """argparse's destination: ``dest``, else the first long flag (else the first flag) in snake case."""
        if "dest" in self.keywords:
            return str(self.keywords["dest"])
        long = [flag for flag in self.flags if flag.startswith("--")]
        return (long or list(self.flags))[0].lstrip("-").replace("-", "_")

    @property
    def action(self) -> str:
        return str(self.keywords.get("action", "store"))

    @property
    def default(self) -> Any:
        return self.keywords.get("default", False if self.action == "store_true" else None)

    def is_simple(self) -> bool:
        """Read alike with or without argparse (which also converts a string default with ``type``)."""
        typed_text_default = "type" in self.keywords and isinstance(self.default, str)
        return self.action in SIMPLE_ACTIONS and SIMPLE_KEYWORDS.issuperset(self.keywords) and not typed_text_default


def add_all(parser: argparse.ArgumentParser, arguments: Iterable[Argument]) -> None:
    """Add the declared arguments to an argparse parser (for help, errors, and every other command line)."""
    groups: dict[str, Any] = {}
    for argument in arguments:
        target: Any = parser
        if argument.group is not None:
            target = groups.get(argument.group) or groups.setdefault(
                argument.group, parser.add_mutually_exclusive_group()
            )
        target.add_argument(*argument.flags, **argument.keywords)


def parse_simple(arguments: Sequence[Argument], argv: Sequence[str], run: Callable[..., int]) -> SimpleNamespace | None:
    """What argparse would parse from ``argv`` (with ``_run`` set to ``run``), when ``argv`` is in the plain
    shape (module docstring); None when only argparse can tell."""
    if not all(argument.is_simple() for argument in arguments):
        return None
    by_flag = {flag: argument for argument in arguments for flag in argument.flags}
    values: dict[str, Any] = {}
    groups_seen: dict[str, str] = {}
    position = 0
    while position < len(argv):
        item = argv[position]
        flag, has_value, value = item.partition("=") if item.startswith("--") else (item, "", "")
        argument = by_flag.get(flag)
        if argument is None:
            return None  # a positional, "--", an abbreviation, an unknown option, "-Cvalue": argparse's to read
        if argument.action == "store_true":
            if has_value:
                return None
            parsed: Any = True
        else:
            if not has_value:
                position += 1
                if position == len(argv) or argv[position].startswith("-"):
                    return None  # no value, or one argparse may take for an option
                value = argv[position]
            parsed = value
            if "type" in argument.keywords:
                try:
                    parsed = argument.keywords["type"](value)
                except (TypeError, ValueError):
                    return None  # argparse says what was wrong with it
        if argument.group is not None and groups_seen.setdefault(argument.group, argument.dest) != argument.dest:
            return None  # two options of one exclusive group: argparse's error
        if argument.action == "append":
            values[argument.dest] = [*values.get(argument.dest, argument.default or []), parsed]
        else:
            values[argument.dest] = parsed
        position += 1
    namespace = SimpleNamespace(**{argument.dest: argument.default for argument in arguments})
    for dest, parsed in values.items():
        setattr(namespace, dest, parsed)
    namespace._run = run
    return namespace
