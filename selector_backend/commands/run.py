"""``run``: start N ranks of the installed build (Gloo rendezvous or mpiexec)."""

from __future__ import annotations

import argparse

NAME = "run"
HELP = "start N ranks of a script with the installed hvd_selector build (like horovodrun)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-np", "--num-proc", dest="num_proc", type=int, required=True, help="number of ranks to start on this host"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a rank waits for its peers (default: HVD_SELECTOR_TIMEOUT or 60)",
    )
    parser.add_argument(
        "--mpiexec", default=None, help="mpiexec to use instead of the one recorded at build time (MPI builds)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")


def run(args: argparse.Namespace) -> int:
    import os

    from ..errors import ExternalError, InputError

    if args.num_proc < 1:
        raise InputError(f"-np must be at least 1 (got {args.num_proc})")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("no command to run; usage: hvd-selector run -np 2 python train.py")
    timeout = args.timeout
    if timeout is None:
        text = os.environ.get("HVD_SELECTOR_TIMEOUT", "60")
        try:
            timeout = float(text)
        except ValueError:
            raise InputError(f"HVD_SELECTOR_TIMEOUT={text!r} must be a number of seconds") from None
    if timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})")
    try:
        from hvd_selector import launcher
    except ImportError as exc:
        raise ExternalError(str(exc)) from None
    try:
        return launcher.launch(args.num_proc, command, timeout, mpiexec=args.mpiexec)
    except FileNotFoundError as exc:
        raise ExternalError(str(exc)) from None
