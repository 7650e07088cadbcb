"""``run``: start N ranks of the installed build (Gloo rendezvous, over ssh with -H, or mpiexec)."""

from __future__ import annotations

import argparse
from typing import Any

from selector_backend.jobs.limits import CHUNK_BYTES, GRACE_SECONDS, REPORT_SECONDS

NAME = "run"
HELP = "start N ranks of a script with the installed hvd_selector build (like horovodrun)"
EPILOG = f"""\
guarantees:
  A rank that fails (exits non-zero or is killed) ends the job: the launcher names the rank
  and its host at once, gives the other ranks {REPORT_SECONDS:g} s to report their own error, then sends them
  SIGTERM, then SIGKILL after the grace period (--grace-period, default {GRACE_SECONDS:g} s).
  SIGTERM, SIGINT (Ctrl-C) and SIGHUP sent to the launcher go to every rank's process group,
  here and on the -H hosts; SIGKILL follows after the grace period, at once on a second
  signal. Each rank runs in a process group of its own behind a supervisor (its subreaper)
  that kills the group and every orphan when the rank ends, and stops them as a signal would
  when the launcher dies, even by SIGKILL. Nothing outlives the job.
  Output is passed on as it comes (\\r progress bars included), at most {CHUNK_BYTES >> 10} KiB per rank's
  stream at a time, and read to the end before the launcher exits; two ranks never share a
  line.

exit codes:
  0 every rank succeeded; N the code of the lowest-numbered rank that failed on its own;
  128+S the launcher got signal S (143 SIGTERM, 130 SIGINT, 129 SIGHUP) and passed it on;
  2 bad input (nothing started); 4 a rank could not be started.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
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
        "--output-filename",
        metavar="DIR",
        default=None,
        help="also write each rank's output to DIR/rank.<rank>/stdout and stderr (as horovodrun's)",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        metavar="SECONDS",
        default=None,
        help=f"seconds between passing a signal (or SIGTERM) to the ranks and SIGKILL (default {GRACE_SECONDS:g})",
    )
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
    elastic = parser.add_argument_group("elastic training (docs/guide/elastic.md)")
    elastic.add_argument(
        "--host-discovery-script",
        default=None,
        metavar="SCRIPT",
        help="program printing the hosts available now, one 'host' or 'host:slots' a line; makes the job elastic",
    )
    elastic.add_argument("--min-np", type=int, default=None, help="fewest ranks the job runs with (default -np)")
    elastic.add_argument("--max-np", type=int, default=None, help="most ranks the elastic job grows to (default -np)")
    elastic.add_argument(
        "--slots", "--slots-per-host", dest="slots", type=int, default=None, help="slots of a host printed without :N"
    )
    elastic.add_argument("--blacklist-cooldown-range", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")


def _seconds(value: float | None, what: str, default: float) -> float:
    import math

    from selector_backend.errors import InputError

    value = default if value is None else value
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be a positive number of seconds (got {value:g})")
    return value


def _elastic_settings(args: argparse.Namespace) -> Any:
    """The elastic settings when --host-discovery-script is given (elastic.Elastic), else None."""
    from selector_backend.errors import InputError

    if args.blacklist_cooldown_range is not None:
        raise InputError(
            "--blacklist-cooldown-range is not supported: a failed host stays blacklisted for the rest of the job"
        )
    if args.host_discovery_script is None:
        for flag, value in (("--min-np", args.min_np), ("--max-np", args.max_np), ("--slots", args.slots)):
            if value is not None:
                raise InputError(f"{flag} needs --host-discovery-script (elastic jobs take their hosts from it)")
        return None
    from selector_backend.jobs.elastic import Elastic

    slots = 1 if args.slots is None else args.slots
    if slots < 1:
        raise InputError(f"--slots must be at least 1 (got {slots})")
    min_np = args.num_proc if args.min_np is None else args.min_np
    max_np = args.num_proc if args.max_np is None else args.max_np
    return Elastic(min_np, max_np, args.host_discovery_script, slots)


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from selector_backend.errors import ExternalError, InputError
    from selector_backend.jobs.rendezvous import RendezvousError

    try:
        from selector_backend.jobs import hosts, launcher
    except ImportError as exc:
        raise ExternalError(str(exc)) from None
    try:
        hosts.check_num_proc(args.num_proc)
    except ValueError as exc:
        raise InputError(str(exc)) from None
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
    timeout = _seconds(timeout, "--timeout", 60.0)
    grace = _seconds(args.grace_period, "--grace-period", launcher.GRACE_SECONDS)
    try:
        host_list = None
        if args.hosts is not None:
            host_list = hosts.parse_hosts(args.hosts)
        elif args.hostfile is not None:
            host_list = hosts.read_hostfile(args.hostfile)
        remote = launcher.Remote(
            ssh_port=args.ssh_port,
            identity_file=args.ssh_identity_file,
            ssh_config=args.ssh_config_file,
            bind=args.bind,
            network_interface=args.network_interface,
        )
        out = launcher.Output(label=args.label_output, directory=args.output_filename)
        settings = _elastic_settings(args)
        if settings is not None:
            if host_list is not None:
                raise InputError("-H/--hostfile with --host-discovery-script: the script names the hosts; drop -H")
            from selector_backend.jobs.elastic import launch_elastic

            return launch_elastic(settings, args.num_proc, command, timeout, remote=remote, out=out, grace=grace)
        return launcher.launch(
            args.num_proc,
            command,
            timeout,
            mpiexec=args.mpiexec,
            hosts=host_list,
            remote=remote,
            out=out,
            grace=grace,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except FileNotFoundError as exc:
        raise ExternalError(str(exc)) from None
    except RendezvousError as exc:  # the store cannot hold the job (descriptor limit)
        raise ExternalError(str(exc)) from None
    except OSError as exc:
        raise ExternalError(f"cannot start the ranks: {exc.strerror or exc}") from None
