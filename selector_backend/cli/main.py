"""The ``hvd-selector`` command line: one module per subcommand.

Each module in ``selector_backend.cli.commands`` defines NAME, HELP,
``add_arguments(parser)`` and ``run(args) -> int`` and keeps heavy imports
inside ``run`` so ``--help`` and every command start fast. A module that
declares its options as data (``ARGUMENTS``, ``cli.arguments``) has a plain
command line read without argparse; argparse (``cli.parsers``) reads every
other one and prints help and usage errors. Errors derived from
SelectorError print one line and exit with their documented code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from selector_backend.cli.arguments import parse_simple
from selector_backend.errors import EXIT_INTERNAL, SelectorError

if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    import argparse

    from selector_backend.cli.parsers import SuggestingParser

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
    from selector_backend.cli.parsers import SuggestingParser

    if name.replace("-", "_") not in COMMAND_MODULES:
        return None
    (module,) = _load_commands(name)
    if name != module.NAME:
        return None
    parser = SuggestingParser(prog=f"{PROG} {module.NAME}", description=module.HELP)
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)
    return parser


def plainly_parsed(name: str, argv: Sequence[str]) -> SimpleNamespace | None:
    """One command's arguments read without argparse, as argparse would read them; None where the command
    declares no ``ARGUMENTS`` or the command line is not plain (``cli.arguments``)."""
    if name.replace("-", "_") not in COMMAND_MODULES:
        return None
    (module,) = _load_commands(name)
    arguments = getattr(module, "ARGUMENTS", None)
    if name != module.NAME or arguments is None:
        return None
    return parse_simple(arguments, argv, module.run)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv and not argv[0].startswith("-") else None
    args: Any = plainly_parsed(first, argv[1:]) if first else None
    if args is None:
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
