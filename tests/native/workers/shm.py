"""Shared-memory transport scenarios: python shm.py OUT_DIR SCENARIO [ARG]."""

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the descriptor listing the directory is gone by now
        return ""


out_dir, scenario = Path(sys.argv[1]), sys.argv[2]
hvd.init()
rank, size = hvd.rank(), hvd.size()

if scenario == "inspect":  # the mapping: its file, mode, and who still holds a descriptor
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "memfd:hvd-selector" in line:
            span = line.split()[0]
            st = os.stat(f"/proc/self/map_files/{span}")
            fds = [f for f in Path("/proc/self/fd").iterdir() if "memfd:hvd-selector" in _link(f)]
            words = (line.split(None, 5)[5], oct(st.st_mode & 0o777), f"{st.st_dev}:{st.st_ino}", f"fds={len(fds)}")
            (out_dir / f"segment{rank}.txt").write_text("|".join(words))
            break
elif scenario == "kill":  # rank 2 is killed while everyone is inside allreduces
    big = np.ones(1 << 22, np.float32)
    if rank == 2:
        start = time.monotonic()
        while time.monotonic() - start < 0.5:
            hvd.allreduce(big)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        while time.monotonic() - start < 60:
            started = time.monotonic()
            hvd.allreduce(big)
    except hvd.HorovodInternalError as exc:
        waited = time.monotonic() - started
        (out_dir / f"outcome{rank}.txt").write_text(f"{type(exc).__name__} {waited:.2f} {exc}")
    sys.stdout.flush()
    os._exit(1)
elif scenario == "stop":  # rank 1 stops (SIGSTOP) between two allreduces; rank 0 times out, then leaves
    x = np.ones(1 << 16, np.float32)
    hvd.allreduce(x)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    hvd.allreduce(x)  # rank 0: CollectiveTimeoutError, uncaught: the exit handlers must not hang
elif scenario == "job":  # values unique to this job: crosstalk would change the sums
    job = int(sys.argv[3])
    ok = True
    for _ in range(200):
        for n in (16, 70_000, 1 << 20):
            x = np.full(n, job * 1000 + rank, np.float64)
            want = sum(job * 1000 + r for r in range(size))
            ok = ok and bool((hvd.allreduce(x, op=hvd.Sum) == want).all())
    (out_dir / f"outcome{rank}.txt").write_text("ok" if ok else "crosstalk")
hvd.shutdown()
