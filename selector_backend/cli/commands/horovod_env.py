"""``horovod-env``: HOROVOD_* variables for building upstream Horovod on this host."""

from __future__ import annotations

import argparse
import json

from selector_backend.cli.commands._common import add_resolution_arguments, selection_from_args

NAME = "horovod-env"
HELP = "the HOROVOD_* environment for `pip install horovod` from source on this host (or --host-profile)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="env, variant and notes as JSON")
    parser.add_argument(
        "--compiler", metavar="NAME@VERSION", help="compiler Horovod will be built with (default: this machine's gcc)"
    )
    add_resolution_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import site
    import sys
    from pathlib import Path

    from selector_backend.errors import InputError
    from selector_backend.interop.horovod import detect_compiler, horovod_env, parse_compiler

    settings, catalog, selection = selection_from_args(args)
    host = selection.host
    if host.cpu is None:
        where = settings.host_profile or "detection"
        raise InputError(
            f"{where}: the host has no cpu; Horovod's build flags need one "
            '(add "cpu": {"microarch": "x86_64_v3"} to the profile, or set HVD_SELECTOR_TARGET)'
        )
    compiler = parse_compiler(args.compiler) if args.compiler else detect_compiler()
    # only this machine's site-packages can hold the wheel of a host we detected here
    search = [] if settings.host_profile else [Path(p) for p in (*site.getsitepackages(), *sys.path) if p]
    result = horovod_env(selection, catalog, compiler, nccl_search=search)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        sys.stdout.write(result.shell())
        for note in result.notes:
            print(f"# {note}")
    return 0
