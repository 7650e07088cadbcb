"""``hvd-selector run -np N [-H host:slots,...] cmd ...``: start N ranks of this build.

Gloo builds: the launcher runs the authenticated rendezvous store
(rendezvous.StoreServer), gives each rank its identity and the one-time
secret through the environment, and watches the ranks: when one fails, the
others get a grace period to report their own error (they see the dead peer
at once) and are then terminated, so a job never outlives its first failure
by more than the timeout. Ranks on other hosts start over ssh (as horovodrun
does) with the secret on ssh's stdin, never on a command line. MPI builds defer to the mpiexec of the MPI the
core was linked against.
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
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from selector_backend.jobs.build_facts import BuildFacts, load_facts
from selector_backend.jobs.rendezvous import StoreServer

POLL_SECONDS = 0.05
KILL_AFTER_SECONDS = 5.0
LOCAL_HOSTS = ("localhost", "127.0.0.1")
FORWARD_PREFIXES = ("HVD_SELECTOR_", "HOROVOD_", "PYTHONPATH", "NCCL_", "OMP_NUM_THREADS")

# Runs on the remote host as ``python -c REMOTE_STUB command...``: reads the job
# secret from stdin (never argv, so never in ps), starts the rank in its own
# session, and when stdin closes (the launcher stopped the job, or died) ends
# the rank's whole process group: no orphans on the remote host.
REMOTE_STUB = (
    "import os,select,signal,subprocess,sys\n"
    "env=dict(os.environ,HVD_SELECTOR_SECRET=sys.stdin.readline().strip())\n"
    "p=subprocess.Popen(sys.argv[1:],env=env,stdin=subprocess.DEVNULL,start_new_session=True)\n"
    "def stop(*_):\n"
    " try:\n  os.killpg(p.pid,signal.SIGTERM);p.wait(5)\n"
    " except subprocess.TimeoutExpired:\n  os.killpg(p.pid,signal.SIGKILL)\n"
    " except ProcessLookupError:\n  pass\n"
    " sys.exit(143)\n"
    "signal.signal(signal.SIGTERM,stop);signal.signal(signal.SIGHUP,stop)\n"
    "while p.poll() is None:\n"
    " if select.select([0],[],[],0.2)[0] and not os.read(0,512):\n  stop()\n"
    "c=p.wait();sys.exit(128-c if c<0 else c)\n"
)


@dataclass(frozen=True)
class Slot:
    """Where one rank runs."""

    rank: int
    host: str
    local_rank: int
    local_size: int

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


@dataclass(frozen=True)
class Remote:
    """How to reach other hosts: ssh settings and the rendezvous's address."""

    ssh_port: int | None = None
    identity_file: str | None = None
    ssh_config: str | None = None
    bind: str | None = None
    network_interface: str | None = None


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``host1:2,host2:2`` (slots default to 1), as horovodrun's -H."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, slots = item.rpartition(":")
        if not sep:
            name, slots = item, "1"
        if not name or not slots.isdigit() or int(slots) < 1:
            raise ValueError(f"-H entry {item!r} must be host or host:slots with slots >= 1")
        hosts.append((name, int(slots)))
    if not hosts:
        raise ValueError("-H names no hosts; use -H host1:2,host2:2")
    return hosts


def read_hostfile(path: str) -> list[tuple[str, int]]:
    """Lines of ``host slots=N`` or ``host:N`` (``#`` comments), as horovodrun's --hostfile."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the hostfile {path}: {exc}") from None
    entries = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith("slots=") and parts[1][6:].isdigit():
            entries.append(f"{parts[0]}:{parts[1][6:]}")
        elif len(parts) == 1:
            entries.append(parts[0])
        else:
            raise ValueError(f"{path}:{number}: expected 'host slots=N' or 'host:N', got {line!r}")
    return parse_hosts(",".join(entries))


def assign(num_proc: int, hosts: Sequence[tuple[str, int]] | None) -> list[Slot]:
    """Fill hosts in order, as horovodrun does; local ranks count per host."""
    if hosts is None:
        return [Slot(r, "localhost", r, num_proc) for r in range(num_proc)]
    capacity = sum(n for _, n in hosts)
    if num_proc > capacity:
        raise ValueError(f"-np {num_proc} is more than the {capacity} slots the hosts offer")
    placed: list[tuple[str, int]] = []
    for host, slots in hosts:
        take = min(slots, num_proc - len(placed))
        placed += [(host, i) for i in range(take)]
    sizes = {h: sum(1 for x, _ in placed if x == h) for h, _ in placed}
    return [Slot(r, h, lr, sizes[h]) for r, (h, lr) in enumerate(placed)]


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


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _describe(code: int) -> str:
    if code > 128 and code - 128 in signal.valid_signals():
        return f"was killed by {signal.Signals(code - 128).name}"
    if code == 255:
        return "exited with code 255 (ssh lost the connection or could not start it)"
    return f"exited with code {code}"


class _Rank:
    """One started rank: its process, where it runs, and whether the launcher stopped it."""

    def __init__(self, slot: Slot, proc: subprocess.Popen[bytes], pumps: list[threading.Thread]) -> None:
        self.slot = slot
        self.proc = proc
        self.pumps = pumps
        self.stopped = False

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.stopped = True
        if self.proc.stdin is not None:  # remote: the stub ends the rank's process group
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.proc.send_signal(signal.SIGTERM)


def _pump(stream: IO[bytes], sink: IO[bytes], lock: threading.Lock, label: bytes) -> None:
    """Copy whole lines, so two ranks' output never shares a line."""
    for line in iter(stream.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        with lock:
            sink.write(label + line)
            sink.flush()
    stream.close()


def _stop(ranks: Sequence[_Rank]) -> None:
    for r in ranks:
        r.stop()
    deadline = time.monotonic() + KILL_AFTER_SECONDS
    for r in ranks:
        try:
            r.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()


def _ssh_argv(slot: Slot, remote: Remote, env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3"]
    if remote.ssh_config:
        argv += ["-F", remote.ssh_config]
    if remote.ssh_port:
        argv += ["-p", str(remote.ssh_port)]
    if remote.identity_file:
        argv += ["-i", remote.identity_file]
    exports = [f"{k}={v}" for k, v in sorted(env.items()) if k != "HVD_SELECTOR_SECRET"]
    line = f"cd {shlex.quote(os.getcwd())} 2>/dev/null; exec env " + " ".join(shlex.quote(e) for e in exports)
    line += f" {shlex.quote(sys.executable)} -c {shlex.quote(REMOTE_STUB)} " + shlex.join(command)
    return [*argv, slot.host, line]


def launch_gloo(
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    hosts: Sequence[tuple[str, int]] | None = None,
    remote: Remote | None = None,
    label_output: bool = False,
) -> int:
    """Run ``command`` as ``num_proc`` ranks (here, or on ``hosts`` over ssh).

    The exit code is that of the lowest-numbered rank that failed on its own
    (not one the launcher stopped), so it does not depend on which rank died
    first; each failed rank is named with its host on stderr.
    """
    remote = remote or Remote()
    slots = assign(num_proc, hosts)
    bind, advertised = rendezvous_address(slots, remote)
    secret = secrets.token_bytes(32)
    server = StoreServer(secret, host=bind).start()
    port = server.address[1]
    base = dict(os.environ if env is None else env)
    ranks: list[_Rank] = []
    lock = threading.Lock()
    try:
        for slot in slots:
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
                argv = list(command)
                full_env = {**base, **rank_env, "HVD_SELECTOR_SECRET": secret.hex()}
                stdin = None
            else:
                forwarded = {k: v for k, v in base.items() if k.startswith(FORWARD_PREFIXES)}
                argv = _ssh_argv(slot, remote, {**forwarded, **rank_env}, command)
                full_env, stdin = dict(base), subprocess.PIPE
            proc = subprocess.Popen(argv, env=full_env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if proc.stdin is not None:
                proc.stdin.write(secret.hex().encode() + b"\n")
                proc.stdin.flush()  # kept open: closing it stops the remote rank
            label = f"[{slot.rank}] ".encode() if label_output else b""
            pumps = [
                threading.Thread(target=_pump, args=(stream, sink, lock, label), daemon=True)
                for stream, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer))
            ]
            for t in pumps:
                t.start()
            ranks.append(_Rank(slot, proc, pumps))
        return _watch(ranks, timeout)
    except KeyboardInterrupt:
        _stop(ranks)
        return 130
    except BaseException:
        _stop(ranks)  # a later rank failed to start: the started ones must not be orphaned
        raise
    finally:
        for r in ranks:
            for t in r.pumps:
                t.join(5.0)
        server.stop()


def _watch(ranks: Sequence[_Rank], timeout: float) -> int:
    """Wait for the ranks; after the first failure the others get ``timeout`` + 2 s to report."""
    deadline: float | None = None
    while any(r.proc.poll() is None for r in ranks):
        if deadline is None and any(r.proc.returncode not in (None, 0) for r in ranks):
            deadline = time.monotonic() + timeout + 2.0
        elif deadline is not None and time.monotonic() > deadline:
            print(
                f"hvd-selector run: a rank failed; stopping the ranks still running after {timeout:g}s",
                file=sys.stderr,
            )
            _stop(ranks)
            break
        time.sleep(POLL_SECONDS)
    failed = [r for r in ranks if r.proc.returncode and not r.stopped]
    for r in ranks:
        if r.proc.returncode and not r.stopped:
            code = _exit_code(r.proc.returncode)
            print(f"hvd-selector run: rank {r.slot.rank} on host {r.slot.host} {_describe(code)}", file=sys.stderr)
        elif r.stopped:
            print(f"hvd-selector run: rank {r.slot.rank} on host {r.slot.host} was stopped", file=sys.stderr)
    if failed:
        return _exit_code(failed[0].proc.returncode)
    return 1 if any(r.stopped for r in ranks) else 0


def mpiexec_command(mpiexec: str, num_proc: int, command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The mpiexec line and extra environment (Open MPI needs flags MPICH does not)."""
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
    return args + list(command), extra_env


def launch_mpi(
    facts: BuildFacts,
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Defer to the mpiexec of the MPI this build linked (recorded at build time)."""
    exe = mpiexec or facts.config.get("mpiexec") or shutil.which("mpiexec") or ""
    if not exe or not (os.path.exists(exe) or shutil.which(exe)):
        raise FileNotFoundError(
            f"mpiexec {exe or '(none recorded)'} not found; this is an MPI build: "
            "install its MPI runtime or pass --mpiexec PATH"
        )
    args, extra_env = mpiexec_command(exe, num_proc, command)
    run_env = dict(os.environ if env is None else env)
    run_env.update(extra_env)
    run_env["HVD_SELECTOR_TIMEOUT"] = f"{timeout:g}"
    try:
        return _exit_code(subprocess.call(args, env=run_env))
    except KeyboardInterrupt:
        return 130


def launch(
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
    hosts: Sequence[tuple[str, int]] | None = None,
    remote: Remote | None = None,
    label_output: bool = False,
) -> int:
    facts = load_facts()
    if uses_mpiexec(facts) or mpiexec:
        if hosts is not None:
            raise ValueError("-H/--hostfile with an MPI build: start the job with your MPI's mpirun --host instead")
        return launch_mpi(facts, num_proc, command, timeout, mpiexec, env)
    return launch_gloo(num_proc, command, timeout, env, hosts, remote, label_output)
