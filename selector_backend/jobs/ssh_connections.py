"""One authenticated ssh connection per few ranks of a host, their sessions multiplexed over it.

Why: sshd's default ``MaxStartups 10:30:100`` drops new connections at random once
ten are still unauthenticated, so starting 16 ranks' ssh at once on one host
failed ("kex_exchange_identification: Connection reset by peer", exit 255), and
each connection cost a key exchange. The launcher opens a master connection
(``ssh -M -N``, OpenSSH's connection sharing) per group of at most
``SESSIONS_PER_CONNECTION`` ranks of a host, below sshd's default ``MaxSessions
10``, waits until each has authenticated, and starts each rank's ssh as a
session over its group's connection (``-o ControlPath=...``). A host that cannot
be reached stops the launch with one line before any rank starts. The elastic
launcher, whose workers come and go, asks for a connection with room as it
starts each worker (``with_room``): one is opened, and waited for, when every
connection to that host already carries that many running sessions. The control
sockets live in a private folder (0700) that is removed with the connections.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from selector_backend.jobs.hosts import Slot

SESSIONS_PER_CONNECTION = 8  # sshd's default MaxSessions is 10 per connection
READY_SECONDS = 60.0  # for a connection to authenticate (sshd's own LoginGraceTime is 120 s)
POLL_SECONDS = 0.02


@dataclass
class Connection:
    """One master connection to a host; ``sessions``: the ssh processes started over it (elastic)."""

    host: str
    socket: Path
    proc: subprocess.Popen[bytes]
    log: Path  # what ssh says (why it cannot connect)
    sessions: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def options(self) -> list[str]:
        """ssh options for a session over this connection."""
        return ["-o", f"ControlPath={self.socket}", "-o", "ControlMaster=no"]

    def running_sessions(self) -> int:
        return sum(1 for s in self.sessions if s.poll() is None)


class SharedConnections:
    """The master connections of one launch: ``options(rank)`` for a rank's ssh; ``close()`` ends them."""

    def __init__(self, ssh: Sequence[str], preexec: Callable[[], None] | None = None) -> None:
        self._ssh = list(ssh)  # ssh and the launch's options, without the host
        self._preexec = preexec
        self._folder: Path | None = None  # made with the first connection
        self._connections: list[Connection] = []
        self._of_rank: dict[int, Connection] = {}

    def open(self, remote: Sequence[Slot], stop: Callable[[], bool]) -> None:
        """One connection per SESSIONS_PER_CONNECTION of the ``remote`` slots on a host (in rank order), all
        started at once; returns once every one has authenticated, or ``stop()``."""
        groups: dict[tuple[str, int], Connection] = {}
        seen: dict[str, int] = {}  # the slots given so far on each host
        for slot in remote:
            group = seen.get(slot.host, 0) // SESSIONS_PER_CONNECTION
            seen[slot.host] = seen.get(slot.host, 0) + 1
            if (slot.host, group) not in groups:
                groups[(slot.host, group)] = self._start(slot.host)
            self._of_rank[slot.rank] = groups[(slot.host, group)]
        self._wait_until_ready(list(groups.values()), stop)

    def with_room(self, host: str, stop: Callable[[], bool]) -> Connection:
        """A connection to ``host`` carrying fewer than SESSIONS_PER_CONNECTION running sessions: one
        already open, else a new one, returned once it has authenticated (or ``stop()``). The caller adds
        the session it starts to ``sessions``."""
        for c in self._connections:
            if c.host == host and c.proc.poll() is None and c.running_sessions() < SESSIONS_PER_CONNECTION:
                return c
        connection = self._start(host)
        self._wait_until_ready([connection], stop)
        return connection

    def _wait_until_ready(self, waiting: list[Connection], stop: Callable[[], bool]) -> None:
        """Until every one of ``waiting`` has authenticated (its control socket exists), or ``stop()``; a
        ConnectionError naming the host for one that ssh gave up on or that took READY_SECONDS."""
        deadline = time.monotonic() + READY_SECONDS
        while waiting and not stop():
            for c in list(waiting):
                if c.socket.exists():
                    waiting.remove(c)
                elif c.proc.poll() is not None:
                    raise ConnectionError(f"cannot reach host {c.host} over ssh: {self._last_words(c)}")
            if waiting and time.monotonic() > deadline:
                raise ConnectionError(
                    f"cannot reach host {waiting[0].host} over ssh: no connection within {READY_SECONDS:g} s"
                )
            time.sleep(POLL_SECONDS)

    def options(self, rank: int) -> list[str]:
        """ssh options for a remote rank's session over its group's connection."""
        return self._of_rank[rank].options

    def close(self) -> None:
        """End every connection (their sessions with them) and remove the sockets' folder."""
        for c in self._connections:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in self._connections:
            try:
                c.proc.wait(5)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        self._connections.clear()
        self._of_rank.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _start(self, host: str) -> Connection:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="hvd-ssh-"))  # 0700; short: a socket path has 108 bytes
        number = len(self._connections)
        socket_path, log = self._folder / str(number), self._folder / f"{number}.log"
        argv = [*self._ssh, "-M", "-N", "-o", f"ControlPath={socket_path}", "-o", "ControlPersist=no", "--", host]
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # the launcher passes signals on itself
                preexec_fn=self._preexec,
            )
        connection = Connection(host, socket_path, proc, log)
        self._connections.append(connection)
        return connection

    @staticmethod
    def _last_words(c: Connection) -> str:
        lines = [line.strip() for line in c.log.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else f"ssh exited with code {c.proc.returncode}"


@contextlib.contextmanager
def shared_connections(
    ssh: Sequence[str], remote: Sequence[Slot], preexec: Callable[[], None] | None, stop: Callable[[], bool]
) -> Iterator[SharedConnections]:
    """``SharedConnections`` opened for the ``remote`` slots (until ``stop()`` says a signal came) and closed
    on the way out, however the launch ended."""
    connections = SharedConnections(ssh, preexec)
    try:
        if remote:
            connections.open(remote, stop)
        yield connections
    finally:
        connections.close()
