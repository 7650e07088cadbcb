"""``hvd-selector run -np N [-H host:slots,...] cmd ...``: start N ranks of this build, as mpirun and horovodrun do.

Gloo builds: the launcher runs the authenticated rendezvous store
(rendezvous.StoreServer), gives each rank its identity and the one-time
secret through the environment, and watches every rank. Ranks on other hosts
start over ssh (as horovodrun does); every rank, here or there, runs behind a
supervisor (supervisor.py) that gets the secret on its stdin, never on a command
line, and stops the rank and all it started when the launcher goes, even by
SIGKILL. MPI builds defer to the mpiexec of the MPI the core was linked against,
which starts each rank behind a supervisor that records the rank's exit code:
where mpiexec says 0 about a job with a failed rank (MPICH's Hydra can), the
launcher reports the rank instead.

What the launcher guarantees (docs/guide/launcher.md):

* a rank that fails (exits non-zero or is killed) ends the job: the others
  get REPORT_SECONDS to report their own error (they see the dead peer at
  once), then SIGTERM, then SIGKILL after the grace period;
* SIGTERM, SIGINT and SIGHUP sent to the launcher go to every rank's process
  group, here and on remote hosts; SIGKILL follows after the grace period
  (at once on a second signal), and the launcher exits with 128 + the signal;
* every rank runs in a process group of its own behind a supervisor that is
  its subreaper: when the rank ends, its group and every orphan it left are
  killed, and when the launcher dies (even by SIGKILL) the supervisor stops the
  rank as a signal would: nothing outlives the job;
* output is passed on as it comes, in bounded chunks (output.py), and the
  launcher reads it to the end before it exits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from selector_backend.jobs import output, rank_settings
from selector_backend.jobs.build_facts import BuildFacts, load_facts
from selector_backend.jobs.hosts import Slot, assign, check_num_proc
from selector_backend.jobs.limits import GRACE_SECONDS, REPORT_SECONDS
from selector_backend.jobs.rendezvous import StoreServer
from selector_backend.jobs.ssh_connections import shared_connections
from selector_backend.jobs.supervisor import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    children,
    load_prctl,
    recorded_failures,
)

POLL_SECONDS = 0.05
REMOTE_MARGIN_SECONDS = 3.0  # after the grace: a remote supervisor's own SIGKILL has had time to report back
DRAIN_SECONDS = 2.0  # after the last rank ended: its output still in the pipes
FORWARD_PREFIXES = ("HVD_SELECTOR_", "HOROVOD_", "PYTHONPATH", "NCCL_", "OMP_NUM_THREADS")
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SUPERVISOR_FILE = Path(__file__).with_name("supervisor.py")
SUPERVISOR = SUPERVISOR_FILE.read_text(encoding="utf-8")  # sent to remote hosts as python -c SUPERVISOR
# The supervisor imports only the standard library, so its Python runs isolated (-I: no PYTHON*
# variables, no user site) and without site (-S: no site-packages, none of their .pth files run):
# nothing the environment adds can break or slow the process in front of every rank. The rank's
# own environment is untouched.
SUPERVISOR_PYTHON = (sys.executable, "-I", "-S")


@dataclass(frozen=True)
class Remote:
    """How to reach other hosts: ssh settings and the rendezvous's address."""

    ssh_port: int | None = None
    identity_file: str | None = None
    ssh_config: str | None = None
    bind: str | None = None
    network_interface: str | None = None


@dataclass(frozen=True)
class Output:
    """Where the ranks' output goes: the terminal (labelled or not) and, optionally, per-rank files."""

    label: bool = False
    directory: str | None = None


def uses_mpiexec(facts: BuildFacts) -> bool:
    """MPI tensor ops, or an MPI-only controller set, start through mpiexec."""
    return facts.tensor_ops == "mpi" or "gloo" not in facts.controllers


def _route_address(host: str) -> str:
    """The local address the kernel would use to reach ``host`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((socket.gethostbyname(host), 9))
        except OSError as exc:
            raise ValueError(f"no route to host {host}: {exc.strerror or exc}") from None
        return str(sock.getsockname()[0])


def rendezvous_address(slots: Sequence[Slot], remote: Remote) -> tuple[str, str]:
    """(bind, advertised) addresses of the store: loopback unless a rank is remote."""
    from selector_backend.jobs.jobenv import interface_address

    if remote.bind:
        bind = remote.bind
    elif remote.network_interface:
        bind = interface_address(remote.network_interface)
    elif all(s.local for s in slots):
        return "127.0.0.1", "127.0.0.1"
    else:
        bind = _route_address(next(s.host for s in slots if not s.local))
    advertised = bind
    if bind in ("0.0.0.0", ""):
        advertised = _route_address(next((s.host for s in slots if not s.local), "127.0.0.1"))
    return bind, advertised


def check_program(command: Sequence[str], env: Mapping[str, str]) -> None:
    """A one-line ValueError, before any rank starts, when this host cannot run ``command[0]``."""
    program = command[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise ValueError(f"cannot run {program}: no such file")
        if not os.access(program, os.X_OK):
            raise ValueError(f"cannot run {program}: not executable (chmod +x it, or run it with its interpreter)")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise ValueError(f"cannot run {program}: command not found on this host's PATH")


def exit_code(returncode: int) -> int:
    """A Popen returncode as a shell shows it: 128 + N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_code(code: int) -> str:
    if code > 128 and code - 128 in signal.valid_signals():
        return f"was killed by {signal.Signals(code - 128).name}"
    if code == 255:
        return "exited with code 255 (ssh lost the connection or could not start it)"
    if code == 127:
        return "exited with code 127 (command not found)"
    return f"exited with code {code}"


def _rank_list(ranks: Sequence[int]) -> str:
    return ",".join(str(r) for r in ranks)


_prctl = load_prctl()


def _adopt_orphans() -> None:
    """Become the parent of whatever mpiexec leaves behind (PR_SET_CHILD_SUBREAPER), so it can be ended."""
    if _prctl is not None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _end_orphans(kill_at: float, received: list[int]) -> None:
    """Ranks mpiexec returned before (MPICH's Hydra does on SIGTERM): waited for, SIGKILLed at ``kill_at``."""
    while orphans := children():
        if time.monotonic() >= kill_at or len(received) > 1:
            for pid in orphans:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(POLL_SECONDS)


def _signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the process group ``pgid`` (a rank's, or mpiexec's); one already gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _die_with_launcher() -> None:
    """Runs in a local rank between fork and exec: the kernel kills it if the launcher dies (even by SIGKILL)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


class _Rank:
    """One started rank: its process (the rank itself, or ssh to it), where it runs, what the launcher sent it."""

    def __init__(self, slot: Slot, proc: subprocess.Popen[bytes], relays: list[threading.Thread]) -> None:
        self.slot = slot
        self.proc = proc
        self.relays = relays
        self.sent: int | None = None  # the signal the launcher sent; None while it runs on its own
        self.killed = False
        self.ended = False

    @property
    def host(self) -> str:
        return socket.gethostname() if self.slot.local else self.slot.host

    @property
    def code(self) -> int:
        return exit_code(self.proc.returncode)

    @property
    def failed_on_its_own(self) -> bool:
        return self.ended and self.code != 0 and self.sent is None

    @property
    def killed_after_grace(self) -> bool:
        """SIGKILLed here, or by its remote supervisor at the same deadline: on a busy machine that can
        end the rank before this launcher's own deadline comes round."""
        return self.killed or (self.ended and self.sent is not None and self.code == 128 + signal.SIGKILL)

    def poll(self) -> bool:
        """True once, when the rank has just ended: then whatever it left in its process group is killed."""
        if self.ended or self.proc.poll() is None:
            return False
        self.ended = True
        _signal_group(self.proc.pid, signal.SIGKILL)
        return True

    def send(self, signum: int) -> None:
        """Pass a signal to the rank's supervisor, which passes it to the rank's process group."""
        if self.ended:
            return
        self.sent = self.sent or signum
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(f"{signum}\n".encode())
            self.proc.stdin.flush()

    def kill(self, remote_deadline_passed: bool) -> None:
        """SIGKILL here; a remote rank's supervisor kills on its own at the same deadline, its ssh only if it hangs."""
        if self.ended:
            return
        self.sent = self.sent or signal.SIGKILL
        self.killed = True
        if self.slot.local:
            self.send(signal.SIGKILL)
        else:
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()
        if remote_deadline_passed:
            self.proc.kill()  # a supervisor that does not answer: the rank dies with it (PR_SET_PDEATHSIG)


@contextlib.contextmanager
def _catch_signals() -> Iterator[list[int]]:
    """The signals of FORWARDED_SIGNALS the launcher receives, in order (main thread only)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum)) for s in FORWARDED_SIGNALS}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _ssh(remote: Remote) -> list[str]:
    """ssh with the launch's options, for a rank's session and for the connection it shares."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3"]
    if remote.ssh_config:
        argv += ["-F", remote.ssh_config]
    if remote.ssh_port:
        argv += ["-p", str(remote.ssh_port)]
    if remote.identity_file:
        argv += ["-i", remote.identity_file]
    return argv


def _ssh_argv(
    slot: Slot,
    remote: Remote,
    env: Mapping[str, str],
    command: Sequence[str],
    grace: float,
    shared: Sequence[str] = (),
) -> list[str]:
    """ssh to the rank's host running its supervisor; ``shared``: the options of the connection it shares."""
    argv = [*_ssh(remote), *shared]
    exports = [f"{k}={v}" for k, v in sorted(env.items()) if k != "HVD_SELECTOR_SECRET"]
    line = f"cd {shlex.quote(os.getcwd())} 2>/dev/null; exec env " + " ".join(shlex.quote(e) for e in exports)
    line += f" {shlex.join(SUPERVISOR_PYTHON)} -c {shlex.quote(SUPERVISOR)} {grace:g} " + shlex.join(command)
    return [*argv, "--", slot.host, line]  # "--": the host (already checked) is never read as an option


def _start(
    slot: Slot,
    argv: list[str],
    env: dict[str, str],
    secret: bytes,
    terminals: tuple[output.Terminal, output.Terminal],
    out: Output,
    files: tuple[IO[bytes] | None, IO[bytes] | None],
) -> _Rank:
    """Start one rank behind its supervisor (here, or over ssh); the secret, then signals, go to the
    supervisor's stdin, kept open; its output is relayed."""
    stdin_copy = None
    if slot.local:  # the rank reads the launcher's stdin, as it always did; the supervisor reads the pipe
        with contextlib.suppress(OSError):
            stdin_copy = os.dup(0)
        fd_option = ["--stdin-fd", str(stdin_copy)] if stdin_copy is not None else []
        argv = [*SUPERVISOR_PYTHON, str(SUPERVISOR_FILE), *fd_option, *argv]
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(stdin_copy,) if stdin_copy is not None else (),
            # ssh ends with a dead launcher (its remote supervisor then stops the rank); a local
            # supervisor sees its stdin close and must live on to stop what the rank started
            preexec_fn=None if slot.local else _die_with_launcher,
        )
    finally:
        if stdin_copy is not None:
            os.close(stdin_copy)
    assert proc.stdin is not None
    proc.stdin.write(secret.hex().encode() + b"\n")
    proc.stdin.flush()
    label = f"[{slot.rank}] ".encode() if out.label else b""
    relays = []
    for stream, terminal, copy in zip((proc.stdout, proc.stderr), terminals, files, strict=True):
        assert stream is not None
        fd = os.dup(stream.fileno())  # the relay owns this descriptor; Popen closes its own
        stream.close()
        relays.append(threading.Thread(target=output.relay, args=(fd, terminal, slot.rank, label, copy), daemon=True))
    for t in relays:
        t.start()
    return _Rank(slot, proc, relays)


def launch_gloo(
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    hosts: Sequence[tuple[str, int]] | None = None,
    remote: Remote | None = None,
    out: Output | None = None,
    grace: float = GRACE_SECONDS,
) -> int:
    """Run ``command`` as ``num_proc`` ranks (here, or on ``hosts`` over ssh) and watch them to the end.

    The exit code is that of the lowest-numbered rank that failed on its own
    (not one the launcher stopped), so it does not depend on which rank died
    first; 128 + N when the launcher got signal N. Each failed rank is named
    with its host on stderr.
    """
    remote, out = remote or Remote(), out or Output()
    slots = assign(num_proc, hosts)
    base = dict(os.environ if env is None else env)
    if any(s.local for s in slots):
        check_program(command, base)
    bind, advertised = rendezvous_address(slots, remote)
    no_files: list[tuple[IO[bytes] | None, IO[bytes] | None]] = [(None, None)] * num_proc
    files = output.output_files(out.directory, num_proc) if out.directory else no_files
    secret = secrets.token_bytes(32)
    server = StoreServer(secret, host=bind, clients=num_proc).start()
    port = server.address[1]
    terminals = (output.Terminal(sys.stdout.buffer), output.Terminal(sys.stderr.buffer))
    ranks: list[_Rank] = []
    # the shared connections close last, after _stop_now: the ranks' sessions run over them
    with _catch_signals() as received, contextlib.ExitStack() as cleanup:
        try:
            shared = cleanup.enter_context(
                shared_connections(
                    _ssh(remote), [s for s in slots if not s.local], _die_with_launcher, lambda: bool(received)
                )
            )
            for slot in slots:
                if received:
                    break  # stopped while starting: the watch below stops the ones already running
                rank_env = {
                    "HVD_SELECTOR_RANK": str(slot.rank),
                    "HVD_SELECTOR_SIZE": str(num_proc),
                    "HVD_SELECTOR_LOCAL_RANK": str(slot.local_rank),
                    "HVD_SELECTOR_LOCAL_SIZE": str(slot.local_size),
                    "HVD_SELECTOR_RENDEZVOUS": f"{advertised}:{port}",
                    "HVD_SELECTOR_TIMEOUT": f"{timeout:g}",
                    "HVD_SELECTOR_HOST": slot.host if not slot.local else socket.gethostname(),
                }
                if remote.network_interface:
                    rank_env["HVD_SELECTOR_IFACE"] = remote.network_interface
                if slot.local:
                    full_env = {**base, **rank_env}  # the secret goes to the supervisor's stdin
                    argv = [f"{grace:g}", *command]
                    ranks.append(_start(slot, argv, full_env, secret, terminals, out, files[slot.rank]))
                else:
                    forwarded = {k: v for k, v in base.items() if k.startswith(FORWARD_PREFIXES)}
                    sharing = shared.options(slot.rank)
                    argv = _ssh_argv(slot, remote, {**forwarded, **rank_env}, command, grace, sharing)
                    ranks.append(_start(slot, argv, dict(base), secret, terminals, out, files[slot.rank]))
            return _watch(ranks, received, grace, terminals)
        except BaseException:
            _stop_now(ranks, grace)  # a later rank failed to start: the started ones must not be orphaned
            raise
        finally:
            server.stop()


def _stop_now(ranks: Sequence[_Rank], grace: float) -> None:
    """SIGTERM, the grace period, SIGKILL: for the ranks started before the launch itself failed."""
    for r in ranks:
        r.send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for r in ranks:
        try:
            r.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.kill(remote_deadline_passed=True)
            r.proc.wait()
        r.poll()


def _watch(
    ranks: Sequence[_Rank], received: list[int], grace: float, terminals: tuple[output.Terminal, output.Terminal]
) -> int:
    """Poll every rank until all have ended, stopping them on a failure or a signal; say what happened."""

    def say(line: str) -> None:
        terminals[1].finish()
        terminals[1].write(None, b"", f"hvd-selector run: {line}\n".encode())

    first: _Rank | None = None  # the first rank that failed on its own
    signalled: int | None = None  # the signal the launcher got and passed on
    term_at: float | None = None  # when the ranks still running get SIGTERM (after a failure)
    kill_at: float | None = None  # when they get SIGKILL
    while True:
        now = time.monotonic()
        for r in ranks:
            if r.poll() and r.failed_on_its_own and first is None and signalled is None:
                first = r
                say(
                    f"rank {r.slot.rank} on host {r.host} {describe_code(r.code)}; "
                    f"stopping the job (the other ranks get {REPORT_SECONDS:g}s to report, then SIGTERM)"
                )
                term_at = now + REPORT_SECONDS
        running = [r for r in ranks if not r.ended]
        if received and signalled is None:
            signalled = received[0]
            for r in running:
                r.send(signalled)
            kill_at = min(kill_at or now + grace, now + grace)
        elif len(received) > 1 and kill_at is not None and kill_at > now:
            kill_at = now  # a second signal: no more grace
        if term_at is not None and now >= term_at and kill_at is None:
            for r in running:
                r.send(signal.SIGTERM)
            kill_at = now + grace
        if kill_at is not None and now >= kill_at:
            for r in running:
                r.kill(remote_deadline_passed=now >= kill_at + REMOTE_MARGIN_SECONDS)
        if not running:
            break
        time.sleep(POLL_SECONDS)
    drain_until = time.monotonic() + DRAIN_SECONDS
    for r in ranks:
        for t in r.relays:
            t.join(max(0.0, drain_until - time.monotonic()))
    return _report(ranks, signalled, grace, say)


def _report(ranks: Sequence[_Rank], signalled: int | None, grace: float, say: Callable[[str], None]) -> int:
    """One line per rank that failed on its own, one for the ranks the launcher stopped; the exit code."""
    failed = [r for r in ranks if r.failed_on_its_own]
    for r in failed:
        say(f"rank {r.slot.rank} on host {r.host} {describe_code(r.code)}")
    stopped = [r.slot.rank for r in ranks if r.sent is not None]
    killed = [r.slot.rank for r in ranks if r.killed_after_grace]
    after_grace = f"; rank(s) {_rank_list(killed)} did not end within {grace:g}s: SIGKILL" if killed else ""
    if signalled is not None:
        name = signal.Signals(signalled).name
        say(f"got {name}: passed it to rank(s) {_rank_list(stopped) or '(none running)'}{after_grace}")
        return 128 + signalled
    if stopped:
        say(f"stopped rank(s) {_rank_list(stopped)} after a rank failed (SIGTERM){after_grace}")
    if failed:
        return failed[0].code
    return 1 if stopped else 0


def mpiexec_command(
    mpiexec: str, num_proc: int, command: Sequence[str], out: Output | None = None
) -> tuple[list[str], dict[str, str]]:
    """The mpiexec line and extra environment (Open MPI needs flags MPICH does not)."""
    out = out or Output()
    extra_env: dict[str, str] = {}
    args = [mpiexec, "-np", str(num_proc)]
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        if num_proc > (os.cpu_count() or 1):
            args.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            extra_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        args += ["--tag-output"] if out.label else []
        args += ["--output-filename", out.directory] if out.directory else []
    else:  # MPICH's Hydra (and its derivatives)
        args += ["-l"] if out.label else []
        if out.directory:
            for rank in range(num_proc):
                (Path(out.directory) / f"rank.{rank}").mkdir(parents=True, exist_ok=True)
            pattern = str(Path(out.directory) / "rank.%r")
            args += ["-outfile-pattern", f"{pattern}/stdout", "-errfile-pattern", f"{pattern}/stderr"]
    return args + list(command), extra_env


def launch_mpi(
    facts: BuildFacts,
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
    out: Output | None = None,
    grace: float = GRACE_SECONDS,
) -> int:
    """Defer to the mpiexec of the MPI this build linked (recorded at build time); pass signals on to it."""
    exe = mpiexec or facts.config.get("mpiexec") or shutil.which("mpiexec") or ""
    if not exe or not (os.path.exists(exe) or shutil.which(exe)):
        raise FileNotFoundError(
            f"mpiexec {exe or '(none recorded)'} not found; this is an MPI build: "
            "install its MPI runtime or pass --mpiexec PATH"
        )
    run_env = dict(os.environ if env is None else env)
    check_program(command, run_env)
    with tempfile.TemporaryDirectory(prefix="hvd-selector-exits-") as exits:
        # every rank behind a supervisor that records its code: mpiexec's alone can hide a failed rank
        supervised = [*SUPERVISOR_PYTHON, str(SUPERVISOR_FILE), "--exit-record", exits, f"{grace:g}", *command]
        args, extra_env = mpiexec_command(exe, num_proc, supervised, out)
        run_env.update(extra_env)
        run_env["HVD_SELECTOR_TIMEOUT"] = f"{timeout:g}"
        code, signalled = _run_mpiexec(args, run_env, grace)
        failed = recorded_failures(exits) if code == 0 and signalled is None else []
    program = os.path.basename(exe)
    if signalled is not None:
        name = signal.Signals(signalled).name
        print(f"hvd-selector run: got {name}: passed it to {program}", file=sys.stderr)
        return 128 + signalled
    for rank, rank_code in failed:
        what = describe_code(rank_code) if rank_code is not None else f"was ended by {program}"
        print(f"hvd-selector run: rank {rank} {what} ({program} reported success)", file=sys.stderr)
    return (failed[0][1] or 1) if failed else code


def _run_mpiexec(args: list[str], run_env: dict[str, str], grace: float) -> tuple[int, int | None]:
    """mpiexec until it ends, signals passed on; its exit code and the signal the launcher got (if any)."""
    with _catch_signals() as received:
        _adopt_orphans()
        proc = subprocess.Popen(args, env=run_env, start_new_session=True, preexec_fn=_die_with_launcher)
        signalled, kill_at = None, None
        while proc.poll() is None:
            now = time.monotonic()
            if received and signalled is None:
                signalled, kill_at = received[0], now + grace
                proc.send_signal(signalled)  # mpiexec passes it to every rank
            elif kill_at is not None and (now >= kill_at or len(received) > 1):
                _signal_group(proc.pid, signal.SIGKILL)
            time.sleep(POLL_SECONDS)
        _signal_group(proc.pid, signal.SIGKILL)  # what mpiexec left behind in its group
        _end_orphans(kill_at if kill_at is not None else time.monotonic() + grace, received)
    return exit_code(proc.returncode), signalled


def launch(
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
    hosts: Sequence[tuple[str, int]] | None = None,
    remote: Remote | None = None,
    out: Output | None = None,
    grace: float = GRACE_SECONDS,
) -> int:
    check_num_proc(num_proc)
    rank_settings.check(os.environ if env is None else env)
    if out is not None and out.directory:
        try:
            Path(out.directory).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--output-filename {out.directory}: {exc.strerror or exc}") from None
    facts = load_facts()
    if uses_mpiexec(facts) or mpiexec:
        if hosts is not None:
            raise ValueError("-H/--hostfile with an MPI build: start the job with your MPI's mpirun --host instead")
        return launch_mpi(facts, num_proc, command, timeout, mpiexec, env, out, grace)
    return launch_gloo(num_proc, command, timeout, env, hosts, remote, out, grace)
