"""What runs in front of every rank: ``python supervisor.py [--stdin-fd N] GRACE COMMAND...``.

The launcher starts one supervisor per rank, here (``python FILE``) or on a
remote host over ssh (``python -c SOURCE``: the remote host needs nothing but
the same Python, so this file imports only the standard library). Over its
stdin the supervisor reads the job secret (never argv, so never in ps) and
then signal numbers: each is passed to the rank's whole process group at once,
and SIGKILL follows after GRACE seconds if the rank has not ended.

Why a process in front of the rank: the launcher can die by SIGKILL, which
leaves it no chance to stop anything, and the kernel's PR_SET_PDEATHSIG ends
only the rank itself, not a ``sleep 300 &`` it left running. The supervisor
sees the launcher go (its stdin closes: the launcher died, stopped the job, or
its ssh connection dropped) and then stops the rank as a signal would
(SIGTERM, SIGKILL after GRACE). It is the rank's child subreaper
(PR_SET_CHILD_SUBREAPER), so whatever the rank starts and orphans, even a
double-forked daemon in a session of its own (``setsid``), becomes the
supervisor's child instead of init's; when the rank ends, every process left
in its group and every such orphan is killed, and the supervisor exits with
the rank's code (128 + N for a rank killed by signal N). The rank gets
PR_SET_PDEATHSIG too: were the supervisor itself killed, the rank would not
outlive it (what the rank started then would).

MPI builds start their ranks through mpiexec, so there the supervisor is
``python supervisor.py --exit-record DIR GRACE COMMAND...``, started by
mpiexec: no secret (MPI builds have none), no launcher pipe to watch (the
signals mpiexec sends it are what it passes on), the rank keeps this stdin and
every descriptor (MPICH's PMI_FD), and the rank's code is also written to
``DIR/<rank>``. The launcher reads DIR because mpiexec's own code can hide a
failed rank: MPICH's Hydra returned 0 in 16 of 30 runs on a loaded 2-core
machine when one rank exited 7 just as the other, having caught the dead
peer's PeerFailureError, exited 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.1
REAP_SECONDS = 5.0  # after the rank ended: the most spent killing what it left (a process stuck in the kernel)


def load_prctl() -> Callable[..., int] | None:
    """libc's prctl on Linux (the launcher uses it too), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, byte by byte (a buffered reader would swallow the signal lines after it)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def children() -> list[int]:
    """This process's children (Linux's /proc/self/task/*/children; none elsewhere)."""
    found: list[int] = []
    for task in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(pid) for pid in task.read_text().split()]
    return found


class Supervisor:
    """The rank, its process group and every orphan it leaves: signalled together, reaped here."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        stdin: int | None,
        prctl: Callable[..., int] | None,
        close_fds: bool = True,
    ) -> None:
        def die_with_supervisor() -> None:
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))

        if prctl is not None:
            prctl(PR_SET_CHILD_SUBREAPER, 1)  # before the rank starts: nothing it orphans may miss us
        self.rank = subprocess.Popen(
            command,
            env=env,
            stdin=stdin,
            close_fds=close_fds,
            start_new_session=True,
            preexec_fn=die_with_supervisor,
        )
        self.code: int | None = None  # the rank's, as a shell shows it

    def signal_all(self, signum: int) -> None:
        """``signum`` to the rank's process group and to every other child (orphans adopted) and its group."""
        targets = [self.rank.pid] if self.code is None else []
        targets += [pid for pid in children() if pid != self.rank.pid]
        for pid in targets:
            for send in (os.killpg, os.kill):  # the group it leads, if any; itself, if it leads none
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    send(pid, signum)

    def reap(self) -> None:
        """Collect every ended child; the rank's status becomes ``code`` (never another's)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.rank.pid:
                self.rank.returncode = os.waitstatus_to_exitcode(status)
                self.code = 128 - self.rank.returncode if self.rank.returncode < 0 else self.rank.returncode

    def end_the_rest(self) -> None:
        """After the rank ended: kill what it left (its group, adopted orphans) until nothing is left."""
        deadline = time.monotonic() + REAP_SECONDS
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.rank.pid, signal.SIGKILL)
        while children() and time.monotonic() < deadline:
            self.signal_all(signal.SIGKILL)
            time.sleep(0.01)
            self.reap()


def mpi_rank(env: dict[str, str]) -> str:
    """This rank's number as its MPI's launcher set it (MPICH's Hydra, Open MPI, PMIx); else the pid."""
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if env.get(name, "").isdigit():
            return env[name]
    return f"pid{os.getpid()}"


RUNNING = "running"  # DIR/<rank> while the rank runs: still there at the end, the supervisor was killed


def record_exit(directory: str, rank: str, state: str) -> None:
    """``state`` (RUNNING, or the exit code) into DIR/<rank>, whole or not at all (a rename). A
    directory that is not there (a rank the MPI's own host file put on another host) is no error:
    mpiexec's code stands for that rank."""
    partial = Path(directory) / f".{rank}.partial"
    with contextlib.suppress(OSError):
        partial.write_text(state, encoding="ascii")
        partial.replace(partial.with_name(rank))


def recorded_failures(directory: str) -> list[tuple[int, int | None]]:
    """(rank, code) of every rank that recorded a non-zero code in DIR, or whose supervisor was
    killed before the rank ended (code None: mpiexec ended it), lowest rank first."""
    found: list[tuple[int, int | None]] = []
    for path in Path(directory).iterdir():
        with contextlib.suppress(OSError, ValueError):
            state = path.read_text(encoding="ascii")
            if path.name.isdigit() and state != "0":
                found.append((int(path.name), None if state == RUNNING else int(state)))
    return sorted(found, key=lambda rank_and_code: rank_and_code[0])


def main(argv: list[str]) -> int:
    stdin: int | None = subprocess.DEVNULL
    exit_record = None
    if argv[:1] == ["--stdin-fd"]:  # a local rank reads the launcher's stdin, as it did before
        stdin, argv = int(argv[1]), argv[2:]
    elif argv[:1] == ["--exit-record"]:  # started by mpiexec: no launcher pipe, the rank keeps stdin
        exit_record, stdin, argv = argv[1], None, argv[2:]
    grace, command = float(argv[0]), argv[1:]
    env = dict(os.environ)
    rank_name = mpi_rank(env)  # the exit record's file name (MPI builds)
    if exit_record is None:
        env["HVD_SELECTOR_SECRET"] = _read_line(0).decode().strip()
    else:
        record_exit(exit_record, rank_name, RUNNING)
    try:
        job = Supervisor(command, env, stdin, load_prctl(), close_fds=exit_record is None)
    except OSError as exc:
        reason = "command not found" if isinstance(exc, FileNotFoundError) else exc.strerror
        print(f"hvd-selector run: cannot start {command[0]!r} on {socket.gethostname()}: {reason}", file=sys.stderr)
        if exit_record is not None:
            record_exit(exit_record, rank_name, "127")
        return 127
    if stdin not in (None, subprocess.DEVNULL):
        os.close(stdin)
    kill_at: float | None = None

    def stop(signum: int) -> None:
        nonlocal kill_at
        job.signal_all(signum)
        if signum == signal.SIGKILL:
            kill_at = time.monotonic()
        elif kill_at is None:
            kill_at = time.monotonic() + grace

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: stop(received))
    # Every signal (SIGCHLD: the rank ended) also wakes the select below, so the rank's end is
    # seen at once, not at the next poll: under mpiexec another rank's end may get this
    # process killed soon after (MPICH's Hydra ends the others when one rank leaves).
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda _received, _frame: None)
    stdin_open, pending = exit_record is None, b""
    while True:
        job.reap()
        if job.code is not None:
            break
        if kill_at is not None and time.monotonic() >= kill_at:
            job.signal_all(signal.SIGKILL)
        ready = select.select([0, woken] if stdin_open else [woken], [], [], POLL_SECONDS)[0]
        if woken in ready:
            os.read(woken, 512)
            continue
        if not ready:
            continue
        data = os.read(0, 64)
        if not data:  # the launcher is gone (or stopped the job): stop the rank as a signal would
            stdin_open = False
            stop(signal.SIGTERM)
            continue
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip().isdigit() and int(line) in signal.valid_signals():
                stop(int(line))
    if exit_record is not None:
        record_exit(exit_record, rank_name, str(job.code))
    job.end_the_rest()
    return job.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
