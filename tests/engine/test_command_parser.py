"""A known command is parsed by its own parser alone (a cold start builds one parser, not two): the same
arguments, defaults, usage and errors as the full ``hvd-selector`` parser gives that command."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from selector_backend.cli import main


def subparser_of(name: str) -> argparse.ArgumentParser:
    """The command's parser as the full parser builds it."""
    full = main.build_parser(None)
    (sub,) = (a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def described(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """What each argument is: its flags, destination, default, count and whether it is required."""
    return [(a.option_strings, a.dest, a.default, a.nargs, a.required) for a in parser._actions]


def command_names() -> list[str]:
    return [module.NAME for module in main._load_commands(None)]


@pytest.mark.parametrize("name", command_names())
def test_a_command_alone_parses_as_the_full_parser(name: str) -> None:
    alone = main.command_parser(name)
    assert alone is not None
    whole = subparser_of(name)
    assert alone.format_help() == whole.format_help()
    assert described(alone) == described(whole)
    assert alone.get_default("_run") is whole.get_default("_run")


def test_resolve_alone_reads_its_options_and_runs_resolve() -> None:
    argv = ["resolve", "--json", "--selector", "target=x86_64_v3", "-C", "a=b"]
    alone = main.command_parser("resolve")
    assert alone is not None
    got = alone.parse_args(argv[1:])
    want = main.build_parser(None).parse_args(argv)
    top_level = ("command", "version")  # the full parser's own destinations
    assert {k: v for k, v in vars(want).items() if k not in top_level} == vars(got)
    assert got.json and got.selector == "target=x86_64_v3"


@pytest.mark.parametrize("name", ["resolv", "build_info", "--json", "no-such"])
def test_no_command_of_that_name_leaves_it_to_the_full_parser(name: str) -> None:
    assert main.command_parser(name) is None


def test_a_bad_option_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main.main(["resolve", "--no-such-option"])
    assert stop.value.code == 2
    assert "hvd-selector resolve: error: unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_setting_up_and_parsing_resolve_ask_the_terminal_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse builds a formatter on every add_argument; ours lays nothing out, so it needs no width.

    The spy counts only argparse's calls and answers them: pytest itself (a worker's report
    under ``-v``) may ask the size meanwhile, and an exception there would end the worker."""
    import shutil
    import traceback

    real = shutil.get_terminal_size
    asked_by_argparse: list[str] = []

    def spy(*args: object, **kwargs: object) -> object:
        callers = [frame.filename for frame in traceback.extract_stack()[:-1]]
        asked_by_argparse.extend([name for name in callers if name.endswith("argparse.py")][:1])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shutil, "get_terminal_size", spy)
    parser = main.command_parser("resolve")
    assert parser is not None
    args = parser.parse_args(["--json", "-C", "a=b"])
    monkeypatch.undo()
    assert args.json and args.config_setting == ["a=b"]
    assert not asked_by_argparse, "the terminal's size was asked for while no help or usage was printed"


def test_a_command_keeps_its_own_formatter_class() -> None:
    """``run`` lays out its epilog (the exit codes) as written: help does not swap in the plain formatter."""
    from selector_backend.cli.commands import run

    parser = main.command_parser("run")
    assert parser is not None
    assert run.EPILOG.strip().splitlines()[-1] in parser.format_help().splitlines()


@pytest.mark.parametrize("columns", [50, 200])
def test_help_and_errors_are_laid_out_for_the_terminal(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    parser = main.command_parser("resolve")
    assert parser is not None
    help_lines = parser.format_help().splitlines()
    assert max(map(len, help_lines)) <= columns
    assert any(len(line) > 80 for line in help_lines) == (columns > 80)
    with pytest.raises(SystemExit):
        main.main(["resolve", "--no-such-option"])
    usage = capsys.readouterr().err.splitlines()
    assert max(map(len, usage[:-1])) <= columns  # the error line itself is not wrapped
    assert (len(usage) == 2) == (columns > 80)  # one usage line when it fits, several at 50 columns


# Pieces of resolve command lines: flags and values as programs write them, and shapes only argparse reads
# (an abbreviation, "--", a value that looks like an option, an attached short value, help).
PLAIN_PIECES = [
    *("--json", "--explain", "--all", "--require-prebuilt", "--index-url", "--index-url=file:///i"),
    *("--selector", "cpu", "target=x86_64_v3", "-C", "--config-setting", "--config-setting=a=b", "a=b"),
    *("--catalog", "--catalog=variants/catalog.toml", "--host-profile", "p.json", "--host-profile=", ""),
]
ODD_PIECES = ["--js", "--", "-", "-Ca=b", "--json=1", "-x", "--help", "-h", "positional"]


@settings(max_examples=400, deadline=None)
@given(argv=st.lists(st.sampled_from(PLAIN_PIECES) | st.sampled_from(ODD_PIECES), max_size=7))
@example(argv=["--json", "--explain"])
@example(argv=["--selector", "--json"])
def test_a_plain_command_line_reads_as_argparse_reads_it(argv: list[str]) -> None:
    """Where the plain reading answers, argparse reads the same values; where argparse refuses (or prints
    help), the plain reading leaves the command line to it."""
    plain = main.plainly_parsed("resolve", argv)
    parser = main.command_parser("resolve")
    assert parser is not None
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            want = vars(parser.parse_args(argv))
        except SystemExit:
            assert plain is None
            return
    if plain is not None:
        assert vars(plain) == want


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--json"],
        ["--json", "--index-url", "https://example.org/simple/"],
        ["--explain", "--all", "--selector=cpu", "-C", "a=b", "--config-setting", "c=d"],
        ["--json", "--require-prebuilt", "--host-profile", "p.json", "--catalog", "variants/catalog.toml"],
    ],
)
def test_what_programs_write_is_read_without_argparse(argv: list[str]) -> None:
    plain = main.plainly_parsed("resolve", argv)
    assert plain is not None
    want = main.command_parser("resolve").parse_args(argv)  # type: ignore[union-attr]
    assert vars(plain) == vars(want)


def test_a_command_without_declared_arguments_is_left_to_argparse() -> None:
    assert main.plainly_parsed("matrix", []) is None
    assert main.plainly_parsed("resolv", ["--json"]) is None
