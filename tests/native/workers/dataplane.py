"""Stray local connections to a rank's data ports during init() and during
collectives: python dataplane.py OUT_DIR.

Before init() each rank starts an attacker thread that never sees the job
secret: it watches this process's listening TCP sockets and, as soon as one
appears, connects to it again and again - garbage, idle sockets, and a
replay of the bytes the listener sent back to it - racing the real peers,
which look the listeners up late.
After init() it knocks on the next rank's TCP ports while every rank checks
200 allreduces (HVD_SELECTOR_SHM=0 keeps them on TCP). Each rank writes
OUT_DIR/outcome<rank>.txt: "<ok|wrong> <strays during init> <most bytes a
stray received> <ports knocked after init> <strays connected after init>".
"""

import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from devtools.stray_connections import open_stray, tcp_ports

out_dir = Path(sys.argv[1])


def own_ports(states: tuple[str, ...]) -> list[int]:
    """Local ports of this process's TCP sockets in `states` (0A: listening, 01: established)."""
    return sorted(tcp_ports([os.getpid()], states))


strays: list[tuple[socket.socket, bytes]] = []  # and what each read while attacking
init_done = threading.Event()


def knock(port: int) -> None:
    """One round of garbage, idle and replayed connections to `port`."""
    for kind in ("garbage", "idle", "replay"):
        stray = open_stray(port, kind, wait=0.2)
        if stray is not None:
            strays.append(stray)


def attack_during_init() -> None:
    deadline = time.monotonic() + 60
    while not init_done.is_set() and time.monotonic() < deadline:
        for port in own_ports(("0A",)):
            knock(port)
        time.sleep(0)


if os.environ.get("HVD_SELECTOR_RANK", "0") != "0":
    # A slow rank: it connects to the listeners 0.5 s after it learned their
    # addresses (one gather), so the strays surely reach the listeners before
    # it does (the race of the DoS).
    from selector_backend.jobs import rendezvous

    gather = rendezvous.StoreClient.gather

    def slow_gather(
        self: rendezvous.StoreClient, prefix: str, rank: int, size: int, value: bytes, timeout_ms: int | None = None
    ) -> list[bytes]:
        table = gather(self, prefix, rank, size, value, timeout_ms)
        if prefix.startswith("tcp/mesh/"):
            time.sleep(0.5)
        return table

    rendezvous.StoreClient.gather = slow_gather  # type: ignore[method-assign]

attacker = threading.Thread(target=attack_during_init, daemon=True)
attacker.start()
hvd.init()
init_done.set()
attacker.join()
rank, size = hvd.rank(), hvd.size()
during_init = len(strays)
most = 0
for s, got in strays:  # what the rank ever sent a stray: at most the listener's hello
    s.settimeout(2)
    try:
        while chunk := s.recv(65536):
            got += chunk
    except OSError:
        pass
    assert not got or got.startswith(b"hvdtcp1\n"), got[:16]
    most = max(most, len(got))
    s.close()
strays.clear()

(out_dir / f"ports{rank}.txt").write_text(" ".join(map(str, own_ports(("01", "0A")))))
hvd.barrier()
stop = threading.Event()


def attack_after_init(ports: list[int]) -> None:
    while not stop.is_set():
        for port in ports:
            knock(port)
        time.sleep(0.01)


ports = [int(p) for p in (out_dir / f"ports{(rank + 1) % size}.txt").read_text().split()]
thread = threading.Thread(target=attack_after_init, args=(ports,), daemon=True)
thread.start()
ok = True
for it in range(200):
    x = np.full(1000 + it, float(rank + 1), np.float32)
    ok = ok and bool((hvd.allreduce(x, op=hvd.Sum) == size * (size + 1) / 2).all())
stop.set()
thread.join()
hvd.barrier()
(out_dir / f"outcome{rank}.txt").write_text(
    f"{'ok' if ok else 'wrong'} {during_init} {most} {len(ports)} {len(strays)}"
)
for s, _ in strays:
    s.close()
hvd.shutdown()
