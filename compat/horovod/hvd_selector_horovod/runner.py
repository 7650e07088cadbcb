"""``horovodrun`` and ``horovod.run(func, np=...)``, answered by ``hvd-selector run``.

Horovod's flags are translated, one by one, into ``hvd-selector run``'s
options or into the HOROVOD_* settings the ranks read. A flag that hvd-selector
cannot honour ends the command before anything starts: one line naming it,
exit 2 (docs/guide/coming-from-horovod.md lists which and why). Nothing is
ignored silently.

``run(func)`` ships ``func`` to the ranks and their results back as pickles
(cloudpickle where installed, as Horovod does) in files of a private 0700
directory on this host, never over a socket; so its ranks are local ones.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from hvd_selector_horovod import run_task

PROG = "horovodrun"
HOROVOD_API = "0.28.1"

# dest -> (Horovod's flag, why hvd-selector cannot honour it) (the one line a user gets, exit 2)
UNSUPPORTED: dict[str, tuple[str, str]] = {
    "config_file": (
        "--config-file",
        "hvd-selector reads no YAML run configuration; give the flags on the command line",
    ),
    "cache_capacity": ("--cache-capacity", "hvd-selector keeps no response cache, so there is no capacity to set"),
    "hierarchical_allreduce": (
        "--hierarchical-allreduce",
        "hvd-selector has no hierarchical allreduce (it picks its algorithm by size and ranks)",
    ),
    "hierarchical_allgather": ("--hierarchical-allgather", "hvd-selector has no hierarchical allgather"),
    "autotune": ("--autotune", "hvd-selector has no autotuner; set --fusion-threshold-mb and --cycle-time-ms yourself"),
    "autotune_log_file": ("--autotune-log-file", "hvd-selector has no autotuner"),
    "autotune_warmup_samples": ("--autotune-warmup-samples", "hvd-selector has no autotuner"),
    "autotune_steps_per_sample": ("--autotune-steps-per-sample", "hvd-selector has no autotuner"),
    "autotune_bayes_opt_max_samples": ("--autotune-bayes-opt-max-samples", "hvd-selector has no autotuner"),
    "autotune_gaussian_process_noise": ("--autotune-gaussian-process-noise", "hvd-selector has no autotuner"),
    "elastic_timeout": (
        "--elastic-timeout",
        "the elastic launcher waits --start-timeout seconds for --min-np ranks; give --start-timeout",
    ),
    "reset_limit": ("--reset-limit", "hvd-selector's elastic jobs have no reset limit of their own"),
    "cooldown_range": (
        "--blacklist-cooldown-range",
        "a host whose worker failed stays blacklisted for the rest of the elastic job",
    ),
    "timeline_filename": ("--timeline-filename", "hvd-selector records no timeline"),
    "timeline_mark_cycles": ("--timeline-mark-cycles", "hvd-selector records no timeline"),
    "stall_check_warning_time_seconds": (
        "--stall-check-warning-time-seconds",
        "hvd-selector has no stall check; a missing peer ends in a timeout error",
    ),
    "stall_check_shutdown_time_seconds": (
        "--stall-check-shutdown-time-seconds",
        "hvd-selector has no stall check; use --start-timeout for the peers' wait",
    ),
    "mpi_threads_disable": ("--mpi-threads-disable", "hvd-selector's MPI build always asks MPI for thread support"),
    "mpi_args": ("--mpi-args", "the launcher passes no extra arguments to mpirun; run your MPI's mpirun yourself"),
    "binding_args": (
        "--binding-args",
        "the launcher binds no processes; run your MPI's mpirun with its binding options",
    ),
    "num_nccl_streams": ("--num-nccl-streams", "hvd-selector uses one NCCL stream"),
    "thread_affinity": ("--thread-affinity", "hvd-selector sets no thread affinity"),
    "gloo_timeout_seconds": ("--gloo-timeout-seconds", "hvd-selector has one peer timeout; give --start-timeout"),
    "log_level": ("--log-level", "hvd-selector's core has no log levels; errors are one line each"),
    "log_with_timestamp": ("--log-with-timestamp", "hvd-selector's core writes no log to timestamp"),
    "prefix_output_with_timestamp": (
        "--prefix-output-with-timestamp",
        "the launcher does not timestamp output lines (--label-output of hvd-selector run labels ranks)",
    ),
    "use_jsrun": ("--jsrun", "hvd-selector does not start jobs with jsrun; use mpirun or srun"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's errors as one line (no usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message}\n")


def _pair(parser: Any, flag: str, dest: str) -> None:
    """Horovod's ``--X`` / ``--no-X`` pair (None: not given)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(f"--{flag}", dest=dest, action="store_const", const=True, default=None)
    group.add_argument(f"--no-{flag}", dest=dest, action="store_const", const=False)


def build_parser() -> argparse.ArgumentParser:
    """Horovod 0.28.1's horovodrun options (horovod/runner/launch.py), every one of them."""
    p = _Parser(prog=PROG, description="Horovod's launcher, answered by hvd-selector run.")
    p.add_argument("-v", "--version", action="version", version=f"{HOROVOD_API} (hvd-selector's Horovod layer)")
    p.add_argument("-np", "--num-proc", dest="num_proc", type=int, default=None)
    p.add_argument("-cb", "--check-build", dest="check_build", action="store_true")
    p.add_argument("--disable-cache", action="store_true", help="accepted: hvd-selector run caches no checks")
    p.add_argument("--start-timeout", type=int, default=None, help="seconds the ranks wait for their peers")
    p.add_argument("--network-interfaces", "--network-interface", dest="nics", action="append", default=None)
    p.add_argument("--output-filename", default=None)
    p.add_argument("--verbose", action="store_true", help="print the hvd-selector run command line first")
    p.add_argument("--config-file", default=None)
    p.add_argument("-p", "--ssh-port", type=int, default=None)
    p.add_argument("-i", "--ssh-identity-file", default=None)
    p.add_argument("--fusion-threshold-mb", type=int, default=None)
    p.add_argument("--cycle-time-ms", type=float, default=None)
    p.add_argument("--cache-capacity", type=int, default=None)
    _pair(p, "hierarchical-allreduce", "hierarchical_allreduce")
    _pair(p, "hierarchical-allgather", "hierarchical_allgather")
    _pair(p, "autotune", "autotune")
    p.add_argument("--autotune-log-file", default=None)
    p.add_argument("--autotune-warmup-samples", type=int, default=None)
    p.add_argument("--autotune-steps-per-sample", type=int, default=None)
    p.add_argument("--autotune-bayes-opt-max-samples", type=int, default=None)
    p.add_argument("--autotune-gaussian-process-noise", type=float, default=None)
    p.add_argument("--min-np", "--min-num-proc", dest="min_num_proc", type=int, default=None)
    p.add_argument("--max-np", "--max-num-proc", dest="max_num_proc", type=int, default=None)
    p.add_argument("--slots-per-host", dest="slots", type=int, default=None)
    p.add_argument("--elastic-timeout", type=int, default=None)
    p.add_argument("--reset-limit", type=int, default=None)
    p.add_argument("--blacklist-cooldown-range", dest="cooldown_range", type=int, nargs=2, default=None)
    p.add_argument("--timeline-filename", default=None)
    _pair(p, "timeline-mark-cycles", "timeline_mark_cycles")
    stall = p.add_mutually_exclusive_group()
    stall.add_argument("--no-stall-check", dest="no_stall_check", action="store_true", help="accepted: no stall check")
    stall.add_argument("--stall-check", dest="stall_check", action="store_true", help="accepted: no stall check")
    p.add_argument("--stall-check-warning-time-seconds", type=int, default=None)
    p.add_argument("--stall-check-shutdown-time-seconds", type=int, default=None)
    _pair(p, "mpi-threads-disable", "mpi_threads_disable")
    p.add_argument("--mpi-args", default=None)
    p.add_argument("--tcp", dest="tcp_flag", action="store_true", help="accepted: hvd-selector's mesh is TCP")
    p.add_argument("--binding-args", default=None)
    p.add_argument("--num-nccl-streams", type=int, default=None)
    p.add_argument("--thread-affinity", type=int, default=None)
    p.add_argument("--gloo-timeout-seconds", type=int, default=None)
    p.add_argument("--log-level", default=None)
    stamp = p.add_mutually_exclusive_group()
    stamp.add_argument("--log-with-timestamp", dest="log_with_timestamp", action="store_const", const=True)
    stamp.add_argument("--log-without-timestamp", dest="log_with_timestamp", action="store_const", const=False)
    p.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp", action="store_true", default=None)
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", default=None)
    hosts.add_argument("-hostfile", "--hostfile", default=None)
    hosts.add_argument("--host-discovery-script", default=None)
    controller = p.add_mutually_exclusive_group()
    controller.add_argument("--gloo", dest="use_gloo", action="store_true")
    controller.add_argument("--mpi", dest="use_mpi", action="store_true")
    controller.add_argument("--jsrun", dest="use_jsrun", action="store_true", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


class UsageError(ValueError):
    """Bad or unsupported input: one line, exit 2, nothing started."""


def _refuse_unsupported(args: argparse.Namespace) -> None:
    for dest, (flag, why) in UNSUPPORTED.items():
        value = getattr(args, dest)
        if value is None or value is False:
            continue
        raise UsageError(f"{flag} is not supported: {why}")


def _controller_options(args: argparse.Namespace) -> list[str]:
    """--gloo / --mpi checked against the installed build; --mpi names its mpiexec."""
    if not (args.use_gloo or args.use_mpi):
        return []
    from selector_backend.jobs.build_facts import load_facts
    from selector_backend.jobs.launcher import uses_mpiexec

    facts = load_facts()
    if args.use_gloo and uses_mpiexec(facts):
        raise UsageError(
            f"--gloo: this build ({facts.label}) runs its tensor ops over MPI; drop --gloo or install a gloo build"
        )
    if args.use_mpi:
        if "mpi" not in facts.controllers:
            raise UsageError(f"--mpi: this build ({facts.label}) has no MPI controller; drop --mpi or use --gloo")
        mpiexec = facts.config.get("mpiexec", "")
        return ["--mpiexec", mpiexec] if mpiexec and not uses_mpiexec(facts) else []
    return []


def settings_env(args: argparse.Namespace) -> dict[str, str]:
    """The tuning flags as the HOROVOD_* settings the ranks read."""
    env: dict[str, str] = {}
    if args.fusion_threshold_mb is not None:
        if args.fusion_threshold_mb < 0:
            raise UsageError(f"--fusion-threshold-mb {args.fusion_threshold_mb}: give 0 (no fusion) or more MB")
        env["HOROVOD_FUSION_THRESHOLD"] = str(args.fusion_threshold_mb << 20)
    if args.cycle_time_ms is not None:
        if not args.cycle_time_ms >= 0:
            raise UsageError(f"--cycle-time-ms {args.cycle_time_ms:g}: give 0 or more milliseconds")
        env["HOROVOD_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    return env


def run_options(args: argparse.Namespace) -> list[str]:
    """``hvd-selector run`` options for the flags it honours."""
    num_proc = args.num_proc
    if num_proc is None and args.host_discovery_script:  # Horovod's elastic default: start with --min-np
        num_proc = args.min_num_proc
    if num_proc is None:
        raise UsageError("-np is required (the number of ranks to start)")
    opts = ["-np", str(num_proc)]
    if args.host_discovery_script:
        opts += ["--host-discovery-script", args.host_discovery_script]
    for flag, value in (("--min-np", args.min_num_proc), ("--max-np", args.max_num_proc), ("--slots", args.slots)):
        if value is not None:
            opts += [flag, str(value)]
    if args.hosts:
        opts += ["-H", args.hosts]
    if args.hostfile:
        opts += ["--hostfile", args.hostfile]
    if args.ssh_port is not None:
        opts += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        opts += ["-i", args.ssh_identity_file]
    timeout = args.start_timeout
    if timeout is None and os.environ.get("HOROVOD_START_TIMEOUT", "").strip():
        text = os.environ["HOROVOD_START_TIMEOUT"].strip()
        if not text.isdecimal():
            raise UsageError(f"HOROVOD_START_TIMEOUT={text!r} must be a whole number of seconds")
        timeout = int(text)
    if timeout is not None:
        opts += ["--timeout", str(timeout)]
    if args.nics:
        nics = sorted({n for item in args.nics for n in item.split(",") if n})
        if len(nics) != 1:
            raise UsageError(f"--network-interface {','.join(nics)}: hvd-selector run uses one interface; name one")
        opts += ["--network-interface", nics[0]]
    if args.output_filename:
        opts += ["--output-filename", args.output_filename]
    return opts + _controller_options(args)


def launcher_argv() -> list[str]:
    """``hvd-selector run`` as a child of this interpreter (its signal handling stays out of ours)."""
    return [sys.executable, "-m", "selector_backend", "run"]


def check_build_text() -> str:
    """horovodrun --check-build's layout, filled with the installed build's facts."""
    from selector_backend.jobs.build_facts import load_facts

    facts = load_facts()
    frameworks = {f.lower() for f in facts.axis("frameworks")}
    ops = facts.tensor_ops

    def mark(flag: bool) -> str:
        return "[X]" if flag else "[ ]"

    lines = [
        f"Horovod v{HOROVOD_API} (hvd-selector build {facts.label}):",
        "",
        "Available Frameworks:",
        f"    {mark('tensorflow' in frameworks)} TensorFlow",
        f"    {mark('pytorch' in frameworks or 'torch' in frameworks)} PyTorch",
        f"    {mark('mxnet' in frameworks)} MXNet",
        "",
        "Available Controllers:",
        f"    {mark('mpi' in facts.controllers)} MPI",
        f"    {mark('gloo' in facts.controllers)} Gloo",
        "",
        "Available Tensor Operations:",
        f"    {mark(ops == 'nccl')} NCCL",
        "    [ ] DDL",
        "    [ ] CCL",
        f"    {mark(ops == 'mpi')} MPI",
        f"    {mark(ops in ('gloo', 'nccl'))} Gloo",
    ]
    if "gloo" in facts.controllers or ops in ("gloo", "nccl"):
        lines += [
            "",
            "Gloo here is hvd-selector's own authenticated TCP mesh (Horovod's gloo controller role);",
            "no Gloo library is linked.",
        ]
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str], dict[str, str]]:
    """(args, hvd-selector run options, extra environment); UsageError for what cannot be honoured."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    _refuse_unsupported(args)
    if args.check_build:
        return args, [], {}
    return args, run_options(args), settings_env(args)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``horovodrun`` console script."""
    try:
        args, options, extra = parse(sys.argv[1:] if argv is None else argv)
        if args.check_build:
            print(check_build_text())
            return 0
        command = list(args.command)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            raise UsageError("no command to run; usage: horovodrun -np 2 python train.py")
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (ImportError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    argv_run = [*launcher_argv(), *options, *command]
    if args.verbose:
        shown = " ".join(f"{k}={v}" for k, v in extra.items())
        print(f"{PROG}: running {shown + ' ' if shown else ''}{' '.join(argv_run)}", file=sys.stderr)
    try:
        os.execve(argv_run[0], argv_run, {**os.environ, **extra})
    except OSError as exc:
        print(f"{PROG}: error: cannot start hvd-selector run: {exc.strerror or exc}", file=sys.stderr)
        return 4


def entry_point() -> None:
    sys.exit(main())


def run(
    func: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    np: int = 1,
    hosts: str | None = None,
    hostfile: str | None = None,
    start_timeout: int | None = None,
    disable_cache: bool | None = None,
    output_filename: str | None = None,
    verbose: bool | None = None,
    use_gloo: bool | None = None,
    use_mpi: bool | None = None,
    network_interface: str | None = None,
    executable: str | None = None,
    **unsupported: Any,
) -> list[Any]:
    """Horovod's ``horovod.run``: ``func(*args, **kwargs)`` on ``np`` local ranks, the results by rank.

    ``func`` and the results travel as pickles in files of a private (0700)
    directory; remote hosts are refused (no pickle crosses a network).
    """
    given = sorted(k for k, v in unsupported.items() if v is not None)
    if given:
        raise ValueError(f"horovod.run: {', '.join(given)} not supported by hvd-selector's Horovod layer")
    if hosts or hostfile:
        from selector_backend.jobs.hosts import parse_hosts, read_hostfile

        listed = parse_hosts(hosts) if hosts else read_hostfile(str(hostfile))
        remote = sorted({h for h, _ in listed if h not in ("localhost", "127.0.0.1")})
        if remote:
            raise ValueError(
                f"horovod.run: hosts {', '.join(remote)} are remote; hvd-selector's horovod.run runs local ranks "
                "only (func travels as a pickle in a private local directory); use horovodrun -H with a script"
            )
    argv = ["-np", str(np)]
    for flag, value in (("--start-timeout", start_timeout), ("--output-filename", output_filename)):
        if value is not None:
            argv += [flag, str(value)]
    if network_interface:
        argv += ["--network-interface", network_interface]
    argv += ["--gloo"] if use_gloo else ["--mpi"] if use_mpi else []
    try:
        _, options, extra = parse(argv)
    except UsageError as exc:
        raise ValueError(f"horovod.run: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="horovod-run-") as tmp:  # mkdtemp: mode 0700, this user only
        work = Path(tmp)
        (work / "func.pkl").write_bytes(run_task.dumps((func, tuple(args), dict(kwargs or {}))))
        command = [executable or sys.executable, "-m", "hvd_selector_horovod.run_task", tmp]
        if verbose:
            print(f"horovod.run: {' '.join([*launcher_argv(), *options, *command])}", file=sys.stderr)
        proc = subprocess.run([*launcher_argv(), *options, *command], env={**os.environ, **extra}, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"horovod.run: the job failed (hvd-selector run exited with {proc.returncode})")
        return run_task.read_results(work, np)
