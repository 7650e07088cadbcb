"""The ``hvd-selector`` command line: one module per subcommand.

Each module in ``selector_backend.cli.commands`` defines NAME, HELP,
``add_arguments(parser)`` and ``run(args) -> int`` and keeps heavy imports
inside ``run`` so ``--help`` and every command start fast. Errors derived
from SelectorError print one line and exit with their documented code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from selector_backend.errors import EXIT_INTERNAL, SelectorError

# Order is the order of `hvd-selector --help`.
COMMAND_MODULES = (
    "detect",
    "resolve",
    "build_info",
    "doctor",
    "run",
    "matrix",
    "plan",
    "build_variants",
    "spack",
    "horovod_env",
    "cmake_config",
    "config",
    "cache",
)

PROG = "hvd-selector"


def _load_commands(only: str | None = None) -> list[Any]:
    """Import the command modules (just one when the command is known: cold start)."""
    names: tuple[str, ...] = COMMAND_MODULES
    if only is not None and only.replace("-", "_") in COMMAND_MODULES:
        names = (only.replace("-", "_"),)
    # A listed module that fails to import is a bug to surface (exit 1 with the traceback), never a command
    # that silently disappears from --help.
    modules = [f"selector_backend.cli.commands.{name}" for name in names]
    for module in modules:
        __import__(module)  # importlib.import_module, without importing importlib on a cold start
    return [sys.modules[module] for module in modules]


def _version() -> str:
    """The installed distribution's version; a source checkout's catalog version otherwise."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hvd-selector")
    except PackageNotFoundError:
        from selector_backend.engine.catalog import load_catalog

        return f"{load_catalog().version} (source checkout)"


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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    class VersionAction(argparse.Action):
        """--version, looked up only when asked (cold start stays cheap)."""

        def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
            super().__init__(option_strings, dest, nargs=0, **kwargs)

        def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
            print(f"{PROG} {_version()}")
            parser.exit(0)

    parser = SuggestingParser(
        prog=PROG,
        description="Detect this machine, pick the matching build of the hvd-selector collective "
        "library, and drive builds, CI matrices and Spack/Horovod settings from one variant catalog.",
        epilog="Exit codes: 0 ok, 2 bad input, 3 nothing fits or a check found a mismatch, 4 an outside "
        "failure (network, hash, toolchain, build). `hvd-selector COMMAND --help` shows a command's options.",
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _load_commands(only):
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser | None:
    """The parser of one command alone, as the full parser would run it: a cold start builds one parser, not two.

    None when ``name`` is no command's name (the full parser then says so, with the closest choice).
    """
    if name.replace("-", "_") not in COMMAND_MODULES:
        return None
    (module,) = _load_commands(name)
    if name != module.NAME:
        return None
    parser = SuggestingParser(prog=f"{PROG} {module.NAME}", description=module.HELP)
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv and not argv[0].startswith("-") else None
    parser = command_parser(first) if first else None
    if parser is not None:
        args = parser.parse_args(argv[1:])
    else:
        parser = build_parser(first)
        args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except SelectorError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line unless debugging
        if os.environ.get("HVD_SELECTOR_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {exc} "
            "(set HVD_SELECTOR_DEBUG=1 for a traceback and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def entry_point() -> None:
    """The console script."""
    sys.exit(main())
