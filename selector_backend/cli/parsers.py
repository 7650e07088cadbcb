"""The argparse parsers of ``hvd-selector``: help, usage errors, and every command line that
``cli.arguments`` leaves to argparse. Imported only then: argparse imports ``gettext``."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class SetupFormatter(argparse.HelpFormatter):
    """The formatter argparse builds on every ``add_argument`` to check the metavar: it lays nothing out
    for a reader, so it needs no terminal width (the default asks the terminal once per argument)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int = 80) -> None:
        super().__init__(prog, indent_increment, max_help_position, width)


class SuggestingParser(argparse.ArgumentParser):
    """argparse's 'invalid choice' (a command, a sub-command, a --format) with the closest choice,
    as every other unknown name gets (Python 3.14's suggest_on_error, for every Python).

    Help and usage are laid out for the terminal's width, asked for only when they are printed
    (``--help`` or an error): until then a parser given no formatter class uses ``SetupFormatter``.
    A command that sets its own formatter class keeps it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", SetupFormatter)
        super().__init__(*args, **kwargs)

    def _for_a_reader(self) -> None:
        if self.formatter_class is SetupFormatter:
            self.formatter_class = argparse.HelpFormatter

    def format_usage(self) -> str:
        self._for_a_reader()
        return super().format_usage()

    def format_help(self) -> str:
        self._for_a_reader()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        import re

        from selector_backend.errors import did_you_mean

        bad = re.search(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)$", message)
        if bad:
            choices = [c.strip().strip("'\"") for c in bad.group(2).split(",")]
            hint = did_you_mean(bad.group(1), choices)
            message = (
                message[: bad.start()] + f"invalid choice {bad.group(1)!r}{hint}; choose from {', '.join(choices)}"
            )
        super().error(message)
