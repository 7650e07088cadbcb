"""The elastic launcher: ``hvd-selector run -np N --min-np A --max-np B --host-discovery-script S``.

Horovod's elastic model, kept simple. The launcher runs the discovery script
every ``interval`` seconds (bounded by its own timeout) and keeps between
``min_np`` and ``max_np`` workers on the hosts it lists. Whenever the set of
workers changes (a worker failed, a host appeared or vanished) it forms a new
generation: a new rendezvous store with a new secret, each worker's new rank
published in the control store (elastic_protocol). Workers (hvd_selector.elastic)
leave their old mesh and join the new one in the same process, from the
state they last committed.

* a worker that fails (exits non-zero or is killed) gets its host
  blacklisted for the rest of the job: its other workers are stopped and no
  new worker starts there;
* the previous generation's store is stopped as the next forms, so a rank
  still meeting there fails at once instead of waiting for its timeout;
* fewer than ``min_np`` workers for longer than ``timeout`` seconds ends
  the job (exit 1, or the failed worker's code);
* the first worker that exits 0 means the training finished: no new
  generation forms, the others are waited for;
* signals go to every worker as in a fixed job (launcher.py).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from selector_backend.jobs import elastic_protocol as protocol
from selector_backend.jobs import hosts, output
from selector_backend.jobs.launcher import (
    FORWARD_PREFIXES,
    POLL_SECONDS,
    REMOTE_MARGIN_SECONDS,
    Output,
    Remote,
    _catch_signals,
    _die_with_launcher,
    _Rank,
    _ssh,
    _ssh_argv,
    _start,
    check_program,
    describe_code,
    rendezvous_address,
)
from selector_backend.jobs.limits import GRACE_SECONDS
from selector_backend.jobs.rendezvous import StoreClient, StoreServer
from selector_backend.jobs.ssh_connections import SharedConnections

DISCOVERY_INTERVAL = 1.0  # Horovod's: seconds between two runs of the discovery script
DISCOVERY_TIMEOUT = 30.0  # one run of the script


@dataclass(frozen=True)
class Elastic:
    """The elastic settings: rank bounds and where the hosts come from."""

    min_np: int
    max_np: int
    discovery_script: str
    slots: int = 1  # slots of a host the script prints without ``:N``
    interval: float = DISCOVERY_INTERVAL


def discover_hosts(script: str, slots: int = 1, timeout: float = DISCOVERY_TIMEOUT) -> list[tuple[str, int]]:
    """The hosts the script prints now: lines of ``host`` or ``host:slots`` (Horovod's format)."""
    try:
        proc = subprocess.run([script], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ValueError(f"the host discovery script {script} did not answer within {timeout:g}s") from None
    except OSError as exc:
        raise ValueError(f"cannot run the host discovery script {script}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        raise ValueError(f"the host discovery script {script} exited with code {proc.returncode}: {last}")
    return hosts.parse_host_lines(proc.stdout, f"the host discovery script {script}", slots)


@dataclass
class _Worker:
    """One worker process: where it runs and the rank it had in the last generation."""

    name: str
    host: str
    proc: _Rank
    rank: int = -1


@dataclass
class _Job:
    """The elastic job's moving parts, as the driver loop changes them."""

    settings: Elastic
    command: Sequence[str]
    base: dict[str, str]
    timeout: float
    remote: Remote
    out: Output
    grace: float
    control_secret: bytes
    control_address: str
    advertised: str
    bind: str
    terminals: tuple[output.Terminal, output.Terminal]
    workers: dict[str, _Worker] = field(default_factory=dict)  # running, in rank order of the last generation
    ended: list[_Worker] = field(default_factory=list)
    blacklist: set[str] = field(default_factory=set)
    generation: int = 0
    store: StoreServer | None = None
    serial: int = 0
    connections: SharedConnections | None = None  # the workers' ssh sessions share these (ssh_connections)
    stopping: Callable[[], bool] = lambda: False  # a signal came: stop waiting for a connection

    def say(self, line: str) -> None:
        self.terminals[1].finish()
        self.terminals[1].write(None, b"", f"hvd-selector run: {line}\n".encode())

    def used(self, host: str) -> int:
        return sum(1 for w in self.workers.values() if w.host == host)

    def start(self, host: str) -> bool:
        """Start one worker on ``host`` for the next generation (it waits for its assignment); False (and
        the host blacklisted) when ssh cannot reach it."""
        local = host in hosts.LOCAL_HOSTS
        connection = None
        if not local:
            if self.connections is None:
                self.connections = SharedConnections(_ssh(self.remote), _die_with_launcher)
            try:
                connection = self.connections.with_room(host, self.stopping)
            except ConnectionError as exc:
                self.say(f"{exc}; blacklisting it")
                self.blacklist.add(host)
                return False
            if self.stopping():
                return False
        self.serial += 1
        name = f"w{self.serial}"
        slot = hosts.Slot(len(self.workers), host, self.used(host), self.used(host) + 1)
        worker_env = {
            protocol.ELASTIC_ENV: self.control_address,
            protocol.WORKER_ENV: name,
            protocol.FIRST_GENERATION_ENV: str(self.generation + 1),
            "HVD_SELECTOR_TIMEOUT": f"{self.timeout:g}",
            "HVD_SELECTOR_HOST": host if not local else "localhost",
        }
        if self.remote.network_interface:
            worker_env["HVD_SELECTOR_IFACE"] = self.remote.network_interface
        files: tuple[IO[bytes] | None, IO[bytes] | None] = (None, None)
        if local:
            argv = [f"{self.grace:g}", *self.command]
            proc = _start(slot, argv, {**self.base, **worker_env}, self.control_secret, self.terminals, self.out, files)
        else:
            assert connection is not None
            forwarded = {k: v for k, v in self.base.items() if k.startswith(FORWARD_PREFIXES)}
            env = {**forwarded, **worker_env}
            argv = _ssh_argv(slot, self.remote, env, self.command, self.grace, connection.options)
            proc = _start(slot, argv, dict(self.base), self.control_secret, self.terminals, self.out, files)
            connection.sessions.append(proc.proc)
        self.workers[name] = _Worker(name, host, proc)
        return True

    def form(self, control: StoreClient) -> None:
        """A new generation of the running workers: new store, new secret, ranks published."""
        if self.store is not None:
            self.store.stop()  # a rank still meeting in the old generation fails now, not at its timeout
        self.generation += 1
        secret = secrets.token_bytes(32)
        self.store = StoreServer(secret, host=self.bind, clients=len(self.workers)).start()
        where = f"{self.advertised}:{self.store.address[1]}"
        ordered = sorted(self.workers.values(), key=lambda w: (w.rank < 0, w.rank))  # survivors keep their order
        per_host: dict[str, int] = {}
        for w in ordered:
            per_host[w.host] = per_host.get(w.host, 0) + 1
        seen: dict[str, int] = {}
        for rank, w in enumerate(ordered):
            w.rank = rank
            placed = protocol.Assignment(
                self.generation,
                rank,
                len(ordered),
                seen.get(w.host, 0),
                per_host[w.host],
                where,
                protocol.wrap_secret(self.control_secret, self.generation, w.name, secret),
            )
            seen[w.host] = seen.get(w.host, 0) + 1
            control.set(protocol.assignment_key(self.generation, w.name), placed.to_json())
        self.workers = {w.name: w for w in ordered}
        control.set(protocol.CURRENT_KEY, str(self.generation).encode())
        self.say(f"generation {self.generation}: {len(ordered)} rank(s) on {', '.join(sorted(per_host))}")

    def fill(self, offered: Sequence[tuple[str, int]], limit: int) -> bool:
        """Start workers on the free slots of ``offered`` (blacklisted hosts skipped) up to ``limit``."""
        started = False
        for host, slots in offered:
            while host not in self.blacklist and self.used(host) < slots and len(self.workers) < limit:
                if not self.start(host):
                    break
                started = True
        return started


def launch_elastic(
    settings: Elastic,
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    remote: Remote | None = None,
    out: Output | None = None,
    grace: float = GRACE_SECONDS,
) -> int:
    """Run ``command`` as an elastic job of ``num_proc`` workers (between min_np and max_np) until one finishes."""
    if not 1 <= settings.min_np <= num_proc <= settings.max_np:
        raise ValueError(
            f"elastic sizes must satisfy 1 <= --min-np ({settings.min_np}) <= -np ({num_proc}) "
            f"<= --max-np ({settings.max_np})"
        )
    remote, out = remote or Remote(), out or Output()
    if out.directory:
        raise ValueError("--output-filename with an elastic job: not supported yet (ranks change between generations)")
    offered = discover_hosts(settings.discovery_script, settings.slots)
    base = dict(os.environ if env is None else env)
    if any(h in hosts.LOCAL_HOSTS for h, _ in offered):
        check_program(command, base)
    everywhere = [hosts.Slot(0, h, 0, 1) for h, _ in offered]
    bind, advertised = rendezvous_address(everywhere, remote)
    control_secret = secrets.token_bytes(32)
    server = StoreServer(control_secret, host=bind, clients=settings.max_np + 1).start()
    job = _Job(
        settings, command, base, timeout, remote, out, grace, control_secret,
        f"{advertised}:{server.address[1]}", advertised, bind,
        (output.Terminal(sys.stdout.buffer), output.Terminal(sys.stderr.buffer)),
    )  # fmt: skip
    control = StoreClient(advertised, server.address[1], control_secret, timeout)
    try:
        with _catch_signals() as received:
            job.stopping = lambda: bool(received)
            try:
                job.fill(offered, num_proc)
                return _drive(job, control, received)
            finally:
                _stop_all(job)
    finally:
        if job.connections is not None:  # after _stop_all: the workers' sessions run over them
            job.connections.close()
        control.close()
        if job.store is not None:
            job.store.stop()
        server.stop()


def _stop_all(job: _Job) -> None:
    """SIGTERM, the grace period, SIGKILL: whatever still runs when the driver returns."""
    running = list(job.workers.values())
    for w in running:
        w.proc.send(signal.SIGTERM)
    deadline = time.monotonic() + job.grace
    for w in running:
        try:
            w.proc.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill(remote_deadline_passed=True)
            w.proc.proc.wait()
        w.proc.poll()
    for w in [*job.ended, *running]:
        for t in w.proc.relays:
            t.join(2.0)


def _drive(job: _Job, control: StoreClient, received: list[int]) -> int:
    """The driver loop: watch workers, poll discovery, form generations; the job's exit code."""
    settings = job.settings
    if len(job.workers) < settings.min_np:
        job.say(f"the discovery script offers {len(job.workers)} slot(s), fewer than --min-np {settings.min_np}")
        return 1
    job.form(control)
    next_poll = time.monotonic() + settings.interval
    short_since: float | None = None  # when the job fell below min_np
    finished, failure = False, 0
    while True:
        now = time.monotonic()
        changed = False
        for w in list(job.workers.values()):
            if not w.proc.poll():
                continue
            del job.workers[w.name]
            job.ended.append(w)
            code = w.proc.code
            if code == 0:
                finished = True
            elif w.proc.sent is None:
                failure = failure or code
                job.say(f"worker {w.name} (rank {w.rank}) on host {w.host} {describe_code(code)}; blacklisting it")
                job.blacklist.add(w.host)
                for other in job.workers.values():
                    if other.host == w.host:
                        other.proc.send(signal.SIGTERM)
                changed = True
            else:
                changed = True
        if received:
            return _stop_on_signal(job, received)
        if finished:
            return _finish(job)
        if now >= next_poll:
            next_poll = now + settings.interval
            try:
                offered = discover_hosts(settings.discovery_script, settings.slots)
            except ValueError as exc:
                job.say(f"{exc}; keeping the current hosts")
                offered = None
            if offered is not None:
                names = {h for h, _ in offered}
                for w in job.workers.values():
                    if w.host not in names and w.proc.sent is None:
                        job.say(f"host {w.host} left the discovery script's list: stopping worker {w.name}")
                        w.proc.send(signal.SIGTERM)
                changed |= job.fill(offered, settings.max_np)
        alive = [w for w in job.workers.values() if w.proc.sent is None]
        if changed or short_since is not None:
            if len(alive) == len(job.workers) and len(alive) >= settings.min_np:  # the stopped ones have ended
                job.form(control)
                short_since = None
            elif len(alive) < settings.min_np:
                short_since = short_since or now
        if short_since is not None and now - short_since > job.timeout:
            job.say(f"fewer than --min-np {settings.min_np} ranks for {job.timeout:g}s; stopping the job")
            return failure or 1
        time.sleep(POLL_SECONDS)


def _finish(job: _Job) -> int:
    """A worker finished the training: wait (bounded by the timeout) for the others to finish too.

    Failures before this point were recovered from; one now is the job's code.
    """
    failure = 0
    deadline = time.monotonic() + job.timeout
    while job.workers and time.monotonic() < deadline:
        for w in list(job.workers.values()):
            if w.proc.poll():
                del job.workers[w.name]
                job.ended.append(w)
                if w.proc.code != 0:
                    job.say(f"worker {w.name} (rank {w.rank}) on host {w.host} {describe_code(w.proc.code)}")
                    failure = failure or w.proc.code
        time.sleep(POLL_SECONDS)
    if job.workers:
        job.say(f"training finished on one rank; {len(job.workers)} did not end within {job.timeout:g}s")
        return failure or 1
    return failure


def _stop_on_signal(job: _Job, received: list[int]) -> int:
    """Pass the launcher's signal to every worker; SIGKILL after the grace (at once on a second signal)."""
    signum = received[0]
    for w in job.workers.values():
        w.proc.send(signum)
    kill_at = time.monotonic() + job.grace
    while job.workers:
        now = time.monotonic()
        if len(received) > 1:
            kill_at = min(kill_at, now)
        for w in list(job.workers.values()):
            if w.proc.poll():
                del job.workers[w.name]
                job.ended.append(w)
            elif now >= kill_at:
                w.proc.kill(remote_deadline_passed=now >= kill_at + REMOTE_MARGIN_SECONDS)
        time.sleep(POLL_SECONDS)
    job.say(f"got {signal.Signals(signum).name}: passed it to every worker")
    return 128 + signum
