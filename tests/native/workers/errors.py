"""Bad-input scenarios; each rank writes what happened to OUT_DIR/rank<r>.json.

python errors.py OUT_DIR SCENARIO. The outcome records the exception type,
message and how long the failing call took, so the test can check that every
surviving rank got a clear Python exception within a bounded time.
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

out_dir, scenario = Path(sys.argv[1]), sys.argv[2]
hvd.init()
rank, size = hvd.rank(), hvd.size()
outcome: dict[str, object] = {"rank": rank, "error": None}


def record(fn) -> None:
    start = time.monotonic()
    try:
        fn()
    except Exception as exc:  # the point: which exception, with what text
        outcome.update(error=type(exc).__name__, message=str(exc), mro=[c.__name__ for c in type(exc).__mro__])
    outcome["seconds"] = time.monotonic() - start


if scenario == "shape":
    record(lambda: hvd.allreduce(np.ones((3 + rank, 2), np.float32)))
elif scenario == "dtype":
    record(lambda: hvd.allreduce(np.ones(4, np.float32 if rank == 0 else np.float64)))
elif scenario == "op":
    record(lambda: hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum if rank == 0 else hvd.Max))
elif scenario == "kind":
    record(lambda: hvd.allreduce(np.ones(4)) if rank == 0 else hvd.broadcast(np.ones(4), 0))
elif scenario == "gather_dims":
    record(lambda: hvd.allgather(np.ones((2, 3 + rank))))
elif scenario == "chunk_shape":  # on shared memory rank 1 expects two chunks of a slot rank 0 fills one of
    record(lambda: hvd.allreduce(np.ones(4096 * (1 + 2 * min(rank, 1)), np.float32)))
elif scenario == "big_shape":  # large payload path (not the small one-round path)
    record(lambda: hvd.allreduce(np.ones((1 << 16) + rank, np.float32)))
elif scenario == "noncontiguous":
    record(lambda: hvd.allreduce(np.ones((4, 4), np.float32)[:, 1]))
elif scenario == "grouped_noncontiguous":  # numpy fast path hands over to the general one
    record(lambda: hvd.grouped_allreduce([np.ones(3, np.float32), np.ones((4, 4), np.float32)[:, 1]]))
elif scenario == "grouped_unsupported":
    record(lambda: hvd.grouped_allreduce([np.ones(4, np.complex64)] * 2))
elif scenario == "unsupported":
    record(lambda: hvd.allreduce(np.ones(4, np.complex64)))
elif scenario == "die_before":
    if rank == 1:
        os._exit(7)
    record(lambda: hvd.allreduce(np.ones(1 << 20, np.float32)))
elif scenario == "die_during":
    if rank == 1:
        threading.Timer(0.5, lambda: os._exit(7)).start()
    big = np.ones(1 << 22, np.float32)

    def loop() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            hvd.allreduce(big)

    record(loop)
elif scenario == "hang":  # rank 1 never joins the collective
    if rank == 1:
        time.sleep(8)
        os._exit(0)
    record(lambda: hvd.allreduce(np.ones(8, np.float32)))
elif scenario == "leave_early":  # rank 0 leaves at once (no shutdown, exit 0); rank 1 still works
    if rank == 0:
        os._exit(0)
    time.sleep(30)
elif scenario == "ok_after_local_error":
    record(lambda: hvd.allreduce(np.ones((4, 4), np.float32)[:, 1]))
    outcome["after"] = float(hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum)[0])
# atomically: mpiexec may kill a surviving rank while it writes (a peer died), and a
# half-written file must read as no outcome, not as broken JSON
atomic_write_text(out_dir / f"rank{rank}.json", json.dumps(outcome))
sys.stdout.flush()
os._exit(0) if scenario in ("die_before", "die_during", "hang", "leave_early") else hvd.shutdown()
