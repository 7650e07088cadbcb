"""Stray connections to a running job's listening ports (tests and the Horovod suite runner).

A stranger on the host that never saw the job secret: a thread that finds
every TCP port the job's processes (a launcher and its descendants) listen
on - the rendezvous store, the data-plane listeners during init() and
process-set creation - and connects to them again and again: garbage bytes,
idle sockets held open a while, a replay of what the listener sent, and
connect-then-close. Only the job's own ports are touched (read from /proc),
never another process's on this machine.
"""

from __future__ import annotations

import collections
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

KINDS = ("garbage", "idle", "replay", "close")
HELD = 32  # idle strays held open at once (the oldest is closed first)
BURST = 4  # connections to a port each time it is found listening


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree[ppid].append(int(entry))
    return tree


def job_pids(root: int) -> list[int]:
    """`root` and every process below it."""
    tree, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, ()))
    return out


def tcp_ports(pids: list[int], states: tuple[str, ...] = ("0A",)) -> set[int]:
    """Local ports of the processes' TCP sockets in `states` (0A: listening, 01: established),
    their socket inodes matched in /proc/net/tcp{,6}."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] in states and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class StrayConnections:
    """Knocks on every listening port of the process tree under `root` until stop()."""

    def __init__(self, root: int, pause: float = 0.005) -> None:
        self.root = root
        self.pause = pause
        self.ports: set[int] = set()  # every port found listening
        self.connected = 0  # connections the job's listeners accepted
        self._held: collections.deque[socket.socket] = collections.deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stray-connections", daemon=True)

    def __enter__(self) -> StrayConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        while self._held:
            self._held.popleft().close()

    def _run(self) -> None:
        turn, pids, looked = 0, [self.root], 0.0
        while not self._stop.is_set():
            if time.monotonic() - looked > 0.5:  # the tree changes rarely, its ports often
                pids, looked = job_pids(self.root), time.monotonic()
            ports = tcp_ports(pids)
            self.ports |= ports
            for port in sorted(ports):
                for _ in range(BURST):
                    self._knock(port, KINDS[turn % len(KINDS)])
                    turn += 1
            self._stop.wait(self.pause)

    def _knock(self, port: int, kind: str) -> None:
        stray = open_stray(port, kind, wait=0.05)
        if stray is None:
            return
        self.connected += 1
        if kind == "idle":
            self._held.append(stray[0])
            if len(self._held) > HELD:
                self._held.popleft().close()
        else:
            stray[0].close()


def open_stray(port: int, kind: str, wait: float) -> tuple[socket.socket, bytes] | None:
    """One stray connection to 127.0.0.1:`port` of `kind` (see KINDS), left open; with
    what a replay read first (`wait` seconds at most). None when nothing listened there."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
    except OSError:
        return None
    try:
        self_connect = s.getsockname() == s.getpeername()  # a TCP self-connect to a port freed meanwhile
    except OSError:  # the listener already reset it (ENOTCONN)
        self_connect = True
    if self_connect:
        s.close()
        return None
    echo = b""
    try:
        if kind == "garbage":
            s.sendall(os.urandom(4096))
        elif kind == "replay":
            s.settimeout(wait)
            echo = s.recv(4096)
            s.sendall(echo + echo + os.urandom(32))
    except OSError:
        pass
    return s, echo


class BusyLoops:
    """A loaded machine: `n` child processes spinning on a core each until the block ends."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyLoops:
        code = "while True: pass"
        self._procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
