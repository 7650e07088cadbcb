"""``run``: start N ranks of the installed build (Gloo rendezvous, over ssh with -H, or mpiexec)."""

from __future__ import annotations

import argparse

NAME = "run"
HELP = "start N ranks of a script with the installed hvd_selector build (like horovodrun)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int, required=True, help="number of ranks to start")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", default=None, help="hosts and slots, host1:2,host2:2 (ranks start over ssh)")
    where.add_argument("--hostfile", default=None, help="file of 'host slots=N' lines (as horovodrun's --hostfile)")
    parser.add_argument(
        "--network-interface", default=None, help="interface the rendezvous and the ranks' data connections use"
    )
    parser.add_argument(
        "--bind",
        default=None,
        help="address the launcher's rendezvous binds to (default: the one "
        "that reaches the first remote host; loopback for a local job)",
    )
    parser.add_argument("-p", "--ssh-port", type=int, default=None, help="ssh port on the remote hosts")
    parser.add_argument("-i", "--ssh-identity-file", default=None, help="ssh private key for the remote hosts")
    parser.add_argument("--ssh-config-file", default=None, help="ssh_config file (ssh -F) for the remote hosts")
    parser.add_argument("--label-output", action="store_true", help="prefix each output line with [rank]")
    parser.add_argument(
        "--check", action="store_true", help="start the ranks, exchange builds, print the job's build mix; run nothing"
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
    import math
    import os
    import sys

    from selector_backend.errors import ExternalError, InputError

    if args.num_proc < 1:
        raise InputError(f"-np must be at least 1 (got {args.num_proc})")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.check:
        if command:
            raise InputError("--check runs no command; drop the program after it")
        command = [sys.executable, "-m", "hvd_selector._jobcheck"]
    if not command:
        raise InputError("no command to run; usage: hvd-selector run -np 2 python train.py")
    timeout = args.timeout
    if timeout is None:
        text = os.environ.get("HVD_SELECTOR_TIMEOUT", "60")
        try:
            timeout = float(text)
        except ValueError:
            raise InputError(f"HVD_SELECTOR_TIMEOUT={text!r} must be a number of seconds") from None
    if not math.isfinite(timeout) or timeout <= 0:
        raise InputError(f"--timeout must be a positive number of seconds (got {timeout:g})")
    try:
        from selector_backend.jobs import launcher
    except ImportError as exc:
        raise ExternalError(str(exc)) from None
    try:
        hosts = None
        if args.hosts is not None:
            hosts = launcher.parse_hosts(args.hosts)
        elif args.hostfile is not None:
            hosts = launcher.read_hostfile(args.hostfile)
        remote = launcher.Remote(
            ssh_port=args.ssh_port,
            identity_file=args.ssh_identity_file,
            ssh_config=args.ssh_config_file,
            bind=args.bind,
            network_interface=args.network_interface,
        )
        return launcher.launch(
            args.num_proc,
            command,
            timeout,
            mpiexec=args.mpiexec,
            hosts=hosts,
            remote=remote,
            label_output=args.label_output,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except FileNotFoundError as exc:
        raise ExternalError(str(exc)) from None
    except OSError as exc:
        raise ExternalError(f"cannot start the ranks: {exc}") from None
