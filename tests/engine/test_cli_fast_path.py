"""``resolve`` with flags only skips argparse (cold start): it must parse exactly as argparse would."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from typing import Any

import pytest

from selector_backend.cli import main as cli_main
from selector_backend.cli.commands import resolve as resolve_cmd

from .engine_helpers import ROOT, clean_env


def argparse_options(argv: list[str]) -> dict[str, Any]:
    args = vars(cli_main.build_parser("resolve").parse_args(argv))
    assert args.pop("_run") is resolve_cmd.run
    return args


FLAG_SETS = [
    list(combo)
    for size in range(len(resolve_cmd.FAST_FLAGS) + 1)
    for combo in itertools.permutations(resolve_cmd.FAST_FLAGS, size)
    if not {"--json", "--explain"} <= set(combo)
]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f) or "(none)")
def test_fast_path_parses_as_argparse_does(flags: list[str]) -> None:
    fast = cli_main._fast_args(["resolve", *flags])
    assert fast is not None
    assert vars(fast) == {**argparse_options(["resolve", *flags]), "_run": resolve_cmd.run}


@pytest.mark.parametrize(
    "argv",
    [
        ["--index-url", "file:///x"],
        ["--index-url=file:///x"],
        ["--json", "--index-url", "https://example.org/simple"],
        ["--index-url", "file:///x=y", "--explain", "--all"],
        ["--require-prebuilt", "--index-url=a=b"],
    ],
)
def test_fast_path_takes_an_index_url_as_argparse_does(argv: list[str]) -> None:
    fast = cli_main._fast_args(["resolve", *argv])
    assert fast is not None
    assert vars(fast) == {**argparse_options(["resolve", *argv]), "_run": resolve_cmd.run}


def test_every_resolve_option_has_its_default_on_the_fast_path() -> None:
    fast = vars(cli_main._fast_args(["resolve"]))
    assert set(fast) - {"_run"} == set(argparse_options(["resolve"]))  # command and --version too


@pytest.mark.parametrize(
    "argv",
    [
        ["resolve", "--json", "--explain"],  # argparse names the conflict
        ["resolve", "--json", "--json"],
        ["resolve", "--index-url"],  # no value
        ["resolve", "--index-url="],
        ["resolve", "--index-url", "-x"],  # argparse reads it as an option
        ["resolve", "--index-url", "a", "--index-url", "b"],
        ["resolve", "--index", "file:///x"],  # an abbreviation argparse accepts
        ["resolve", "--json=1"],
        ["resolve", "-C", "target=x86_64"],
        ["resolve", "--help"],
        ["resolve", "--jsn"],
        ["detect", "--json"],
        [],
    ],
)
def test_anything_else_goes_through_argparse(argv: list[str]) -> None:
    assert cli_main._fast_args(argv) is None


def test_a_plain_resolve_json_loads_no_argparse(tmp_path: Any) -> None:
    code = (
        "import sys, io, contextlib\n"
        "from selector_backend.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    rc = main(['resolve', '--json'])\n"
        "print(rc, 'argparse' in sys.modules, out.getvalue()[:1])\n"
    )
    env = clean_env(tmp_path)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "False", "{"]


def test_fast_and_argparse_paths_print_the_same(tmp_path: Any) -> None:
    """``--json`` takes the fast path; ``--json --selector auto`` (the default selector, an option with a
    value) takes argparse's: the same request, the same answer."""
    env = clean_env(tmp_path)
    outs = []
    for extra in ([], ["--selector", "auto"]):
        proc = subprocess.run(
            [sys.executable, "-m", "selector_backend", "resolve", "--json", *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]
