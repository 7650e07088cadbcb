"""A known command is parsed by its own parser alone (a cold start builds one parser, not two): the same
arguments, defaults, usage and errors as the full ``hvd-selector`` parser gives that command."""

from __future__ import annotations

import argparse

import pytest

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
