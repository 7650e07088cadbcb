"""The TCP algorithms on both sides of each crossover (tcp_algorithms.h).

Run under the launcher with HVD_SELECTOR_SHM=0: python algorithms.py OUT_DIR [SIZES].
For each case two inputs: small integers as float32 (every order gives the
exact sum: checked here against numpy, so a misrouted block shows) and
float32 values of mixed magnitude (the sum depends on the order: every
rank's bytes must be equal, which the test compares through the digests in
OUT_DIR/rank<r>.json).
"""

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import hvd_selector as hvd

out_dir = Path(sys.argv[1])
KIB, MIB = 1 << 10, 1 << 20
# Element counts (float32) just below and at each crossover: allreduce 64 KiB
# (doubling -> halving-doubling) and 4 MiB (-> ring off powers of two),
# broadcast 256 KiB (tree -> scatter + allgather), allgather 16 MiB of output
# (bruck -> ring).
ALLREDUCE = [1 * KIB // 4 + 1, 64 * KIB // 4 - 1, 64 * KIB // 4, 4 * MIB // 4 - 1, 4 * MIB // 4]
BROADCAST = [256 * KIB // 4 - 1, 256 * KIB // 4]
ALLGATHER = [16 * MIB // 4 - 1, 16 * MIB // 4]
if len(sys.argv) > 2 and sys.argv[2] == "small":  # 64-rank jobs on 2 cores: the small side only
    ALLREDUCE, BROADCAST, ALLGATHER = ALLREDUCE[:3], BROADCAST[:1], [4 * KIB]

hvd.init()
rank, size = hvd.rank(), hvd.size()
failures: dict[str, str] = {}
digests: dict[str, str] = {}


def exact(rank_: int, n: int) -> np.ndarray:
    return (((np.arange(n) * (rank_ + 3) + rank_) % 7) - 2).astype(np.float32)


def over_ranks(reduce: Callable[..., np.ndarray], n: int) -> np.ndarray:
    """``reduce`` (np.sum, np.max) of every rank's exact(r, n), element by element. exact(r, .) repeats
    every 7 elements, so one period of each rank is reduced and repeated: every rank checks its whole
    result without making each rank's input (at 12 ranks that was most of a rank's CPU)."""
    period = reduce([exact(r, 7).astype(np.float64) for r in range(size)], axis=0).astype(np.float32)
    return period[np.arange(n) % 7]


def mixed(rank_: int, n: int) -> np.ndarray:
    """Magnitudes from 1e-3 to 1e7 with both signs: a different order rounds differently."""
    rng = np.random.default_rng(1000 + rank_)
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 8, n)).astype(np.float32)


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        failures[name] = f"{bad.size} elements differ, first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


def digest(name: str, got: np.ndarray) -> None:
    digests[name] = hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest()


for n in ALLREDUCE:
    check(f"allreduce/{n}", hvd.allreduce(exact(rank, n), op=hvd.Sum), over_ranks(np.sum, n))
    digest(f"allreduce-mixed/{n}", hvd.allreduce(mixed(rank, n), op=hvd.Sum))
    check(f"allreduce-max/{n}", hvd.allreduce(exact(rank, n), op=hvd.Max), over_ranks(np.max, n))
for n in BROADCAST:
    root = size - 1 if size > 2 else 1
    mine = mixed(root, n) if rank == root else np.zeros(n, np.float32)
    got = hvd.broadcast(mine, root_rank=root)
    check(f"broadcast/{n}", got, mixed(root, n))
for total in ALLGATHER:
    # Uneven parts (rank r gives r + 1 shares of a total just below or at the crossover).
    weights = np.arange(1, size + 1)
    parts = (total * np.cumsum(weights) // weights.sum()).tolist()
    begin = [0, *parts[:-1]]
    everything = exact(7, total) + np.arange(total, dtype=np.float32)
    got = hvd.allgather(everything[begin[rank] : parts[rank]])
    check(f"allgather/{total}", got, everything)
hvd.barrier()


def sockets() -> int:
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if fd.exists() and str(fd.readlink()).startswith("socket:"))


# Connections: the algorithms' peers after init; every rank after the first alltoall (which opens the rest).
before = sockets()
rows = np.arange(size * 3, dtype=np.int32).reshape(size, 3) + 100 * rank
check("alltoall", hvd.alltoall(rows), np.stack([np.arange(3 * rank, 3 * rank + 3) + 100 * src for src in range(size)]))
check(
    "alltoall-again",
    hvd.alltoall(rows),
    np.stack([np.arange(3 * rank, 3 * rank + 3) + 100 * src for src in range(size)]),
)
after = sockets()
if size >= 12:  # a process set of 10: its own connections (not all pairs), its first alltoall opens the rest
    # The core's process-set calls, as hvd_selector.torch's add_process_set makes them (every rank in the
    # same order); torch itself is not needed for that, and importing it cost each of the 12 ranks 1.8 s.
    from hvd_selector import _api

    first10 = list(range(10))
    if rank in first10:
        _api._connect_process_set(1, first10, 1)
        _api._core.use_process_set(1)
        try:
            v = np.arange(300, dtype=np.float32) * (rank + 1)
            check("process set allreduce", hvd.allreduce(v, op=hvd.Sum), np.arange(300, dtype=np.float32) * 55)
            t = np.arange(10, dtype=np.int32) + 100 * rank
            splits = [1] * len(first10)
            recv = _api._core.alltoall_prepare(t, splits)
            got = np.empty(sum(recv), dtype=np.int32)
            _api._core.alltoall(t, splits, got, recv)
            check("process set alltoall", got, np.arange(10, dtype=np.int32) * 100 + rank)
        finally:
            _api._core.use_process_set(0)
    hvd.barrier()
result = {"failures": failures, "digests": digests, "sockets": [before, after]}
(out_dir / f"rank{rank}.json").write_text(json.dumps(result))
hvd.shutdown()
