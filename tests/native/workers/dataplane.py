"""Stray local connections to the ranks' Gloo ports while the job runs:
python dataplane.py OUT_DIR. Each rank knocks on the next rank's TCP ports
with garbage, idle sockets and a replay of a pair tag; every rank checks 200
allreduces (HVD_SELECTOR_SHM=0 keeps them on Gloo TCP) and records how many
stray connections got through (Gloo closes its listeners after init)."""

import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from hvd_selector._dataplane import tag

out_dir = Path(sys.argv[1])
hvd.init()
rank, size = hvd.rank(), hvd.size()


def own_ports() -> list[int]:
    """Local ports of this process's TCP sockets, listening or connected (its
    sockets' inodes in /proc/self/net/tcp): where a stray process would knock."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] in ("01", "0A") and fields[9] in inodes:
            ports.append(int(fields[1].split(":")[1], 16))
    return ports


(out_dir / f"ports{rank}.txt").write_text(" ".join(map(str, own_ports())))
hvd.barrier()
held: list[socket.socket] = []
stop = threading.Event()


def attack(ports: list[int]) -> None:
    replay = tag(b"k" * 32, b"n" * 16, 0, 1)
    while not stop.is_set():
        for port in ports:
            for payload in (os.urandom(4096), b"", replay * 4):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=1)
                    if payload:
                        s.sendall(payload)
                    held.append(s)  # idle: kept open until the end
                except OSError:
                    pass
        time.sleep(0.01)


ports = [int(p) for p in (out_dir / f"ports{(rank + 1) % size}.txt").read_text().split()]
thread = threading.Thread(target=attack, args=(ports,), daemon=True)
thread.start()
ok = True
for it in range(200):
    x = np.full(1000 + it, float(rank + 1), np.float32)
    ok = ok and bool((hvd.allreduce(x, op=hvd.Sum) == size * (size + 1) / 2).all())
stop.set()
thread.join()
hvd.barrier()
(out_dir / f"outcome{rank}.txt").write_text(f"{'ok' if ok else 'wrong'} {len(ports)} {len(held)}")
for s in held:
    s.close()
hvd.shutdown()
