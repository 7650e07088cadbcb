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
    # Both jobs reduce at the same time: each job's rank 0 says it is ready (OUT_DIR/../ready<job>), and
    # waits, bounded, for the other job's word before its job starts.
    if rank == 0:
        (out_dir.parent / f"ready{job}").touch()
        deadline = time.monotonic() + 120
        while not (out_dir.parent / f"ready{3 - job}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    hvd.barrier()
    ok = True
    for _ in range(50):
        for n in (16, 70_000, 1 << 20):
            x = np.full(n, job * 1000 + rank, np.float64)
            want = sum(job * 1000 + r for r in range(size))
            ok = ok and bool((hvd.allreduce(x, op=hvd.Sum) == want).all())
    (out_dir / f"outcome{rank}.txt").write_text("ok" if ok else "crosstalk")
elif scenario == "rule":  # each collective at each size (float32 elements): exact, in rank order
    # Before each, an access() of /hvd-route/<collective>-<n> marks the trace (test_shm_rule reads
    # which system calls each collective made); a barrier after each closes its reads.
    def values(r: int, n: int) -> np.ndarray:
        return np.random.default_rng(r * 7919 + n).standard_normal(n).astype(np.float32)

    failed = []
    for n in [int(word) for word in sys.argv[3].split(",")]:
        inputs = [values(r, n) for r in range(size)]
        for name, op in (("allreduce", hvd.Sum), ("allreduce-max", hvd.Max)):
            want = inputs[0].copy()
            for x in inputs[1:]:
                want = want + x if op == hvd.Sum else np.maximum(want, x)
            os.access(f"/hvd-route/{name}-{n}", os.F_OK)
            got = hvd.allreduce(inputs[rank], op=op)
            hvd.barrier()
            if got.tobytes() != want.tobytes():
                failed.append(f"{name} {n}")
        rows = [n // size + (r < n % size) for r in range(size)]
        os.access(f"/hvd-route/allgather-{n}", os.F_OK)
        got = hvd.allgather(inputs[rank][: rows[rank]])
        hvd.barrier()
        if got.tobytes() != np.concatenate([x[:k] for x, k in zip(inputs, rows, strict=True)]).tobytes():
            failed.append(f"allgather {n}")
        os.access(f"/hvd-route/broadcast-{n}", os.F_OK)
        got = hvd.broadcast(inputs[rank], root_rank=size - 1)
        hvd.barrier()
        if got.tobytes() != inputs[-1].tobytes():
            failed.append(f"broadcast {n}")
    (out_dir / f"outcome{rank}.txt").write_text(" ".join(failed) or "ok")
hvd.shutdown()
