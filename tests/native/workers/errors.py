"""Bad-input scenarios; each rank writes what happened to OUT_DIR/rank<r>.json.

python errors.py OUT_DIR SCENARIO[,SCENARIO...]. Calls that fail with an exception run one
after another in one job, as a user's script meets them; the job must stay usable after each
(the same ranks, the next call). A scenario that ends a rank (die_*, hang, leave_early) is the
only one of its job. Each outcome records the exception type, message and how long the failing
call took, so the test can check that every surviving rank got a clear Python exception within
a bounded time. The file is rewritten after every scenario, so a job that breaks part way
still shows which scenarios ran.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from selector_backend.files.atomic import atomic_write_text

out_dir, scenarios = Path(sys.argv[1]), sys.argv[2].split(",")
hvd.init()
rank, size = hvd.rank(), hvd.size()


def die_before() -> None:
    if rank == 1:
        os._exit(7)
    hvd.allreduce(np.ones(1 << 20, np.float32))


def die_during() -> None:
    if rank == 1:
        threading.Timer(0.5, lambda: os._exit(7)).start()
    big = np.ones(1 << 22, np.float32)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        hvd.allreduce(big)


def hang() -> None:  # rank 1 never joins the collective
    if rank == 1:
        time.sleep(8)
        os._exit(0)
    hvd.allreduce(np.ones(8, np.float32))


def leave_early() -> None:  # rank 0 leaves at once (no shutdown, exit 0); rank 1 still works
    if rank == 0:
        os._exit(0)
    time.sleep(30)


#: scenario -> the call every rank makes (its own arguments, by rank)
CALLS = {
    "shape": lambda: hvd.allreduce(np.ones((3 + rank, 2), np.float32)),
    "dtype": lambda: hvd.allreduce(np.ones(4, np.float32 if rank == 0 else np.float64)),
    "op": lambda: hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum if rank == 0 else hvd.Max),
    "kind": lambda: hvd.allreduce(np.ones(4)) if rank == 0 else hvd.broadcast(np.ones(4), 0),
    "gather_dims": lambda: hvd.allgather(np.ones((2, 3 + rank))),
    # on shared memory rank 1 expects two chunks of a slot rank 0 fills one of
    "chunk_shape": lambda: hvd.allreduce(np.ones(4096 * (1 + 2 * min(rank, 1)), np.float32)),
    # the large payload path (not the small one-round path)
    "big_shape": lambda: hvd.allreduce(np.ones((1 << 16) + rank, np.float32)),
    "noncontiguous": lambda: hvd.allreduce(np.ones((4, 4), np.float32)[:, 1]),
    # the numpy fast path hands over to the general one
    "grouped_noncontiguous": lambda: hvd.grouped_allreduce([np.ones(3, np.float32), np.ones((4, 4), np.float32)[:, 1]]),
    "grouped_unsupported": lambda: hvd.grouped_allreduce([np.ones(4, np.complex64)] * 2),
    "unsupported": lambda: hvd.allreduce(np.ones(4, np.complex64)),
    # after the others: a call that must work, its result recorded
    "sum": lambda: float(hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum)[0]),
    "die_before": die_before,
    "die_during": die_during,
    "hang": hang,
    "leave_early": leave_early,
}
ENDS_A_RANK = {"die_before", "die_during", "hang", "leave_early"}


def record(call) -> dict[str, object]:
    outcome: dict[str, object] = {"rank": rank, "error": None}
    start = time.monotonic()
    try:
        result = call()
        if isinstance(result, float):  # "sum"'s; the failing calls return nothing
            outcome["result"] = result
    except Exception as exc:  # the point: which exception, with what text
        outcome.update(error=type(exc).__name__, message=str(exc), mro=[c.__name__ for c in type(exc).__mro__])
    outcome["seconds"] = time.monotonic() - start
    return outcome


outcomes: dict[str, dict[str, object]] = {}
for scenario in scenarios:
    outcomes[scenario] = record(CALLS[scenario])
    # atomically: mpiexec may kill a surviving rank while it writes (a peer died), and a
    # half-written file must read as no outcome, not as broken JSON
    atomic_write_text(out_dir / f"rank{rank}.json", json.dumps(outcomes))
sys.stdout.flush()
os._exit(0) if ENDS_A_RANK.intersection(scenarios) else hvd.shutdown()
