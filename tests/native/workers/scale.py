"""Scale scenarios of the gloo controller: python scale.py OUT_DIR SCENARIO.

  exact:     small exact allreduce/allgather/broadcast/alltoall on every rank
             (the 64-rank multi-host check; digests of an order-sensitive sum).
  die:       rank size // 2 + 1 exits in the middle of allreduces; every other
             rank records the error it got and how long it took.
  fd_limit:  after init() every rank lowers its open-files limit below what
             alltoall's extra connections need; alltoall must fail with one line.
Each rank writes OUT_DIR/rank<r>.json. A third argument "namespaces" makes each
namespace host (HVD_SELECTOR_HOST, set by the launcher) a host of its own for
shared memory, which would otherwise span them (one kernel).
"""

import hashlib
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd

out_dir, scenario = Path(sys.argv[1]), sys.argv[2]
if sys.argv[3:] == ["namespaces"]:  # namespace hosts share one kernel: tell shared memory where hosts end
    os.environ["HVD_SELECTOR_HOST_ID"] = os.environ["HVD_SELECTOR_HOST"]
hvd.init()
rank, size = hvd.rank(), hvd.size()
outcome: dict[str, object] = {"rank": rank}


def write() -> None:
    tmp = out_dir / f".rank{rank}.json"
    tmp.write_text(json.dumps(outcome))
    tmp.rename(out_dir / f"rank{rank}.json")


if scenario == "exact":
    n = 300  # past the 1 KiB inline payload: the TCP algorithms (and the host leaders) reduce
    x = ((np.arange(n) * (rank + 3) + rank) % 7 - 2).astype(np.float32)
    want = sum(((np.arange(n) * (r + 3) + r) % 7 - 2) for r in range(size)).astype(np.float32)
    rng = np.random.default_rng(rank)
    mixed = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 8, n)).astype(np.float32)
    got = {
        "allreduce": bool(np.array_equal(hvd.allreduce(x, op=hvd.Sum), want)),
        "allgather": bool(np.array_equal(hvd.allgather(np.full(2, rank, np.int32)), np.repeat(np.arange(size), 2))),
        "broadcast": bool(
            np.array_equal(hvd.broadcast(np.full(5, rank, np.int64), root_rank=size - 1), [size - 1] * 5)
        ),
        "alltoall": bool(
            np.array_equal(hvd.alltoall(np.arange(size, dtype=np.int32) + 1000 * rank), np.arange(size) * 1000 + rank)
        ),
    }
    outcome["ok"] = got
    outcome["digest"] = hashlib.sha256(hvd.allreduce(mixed, op=hvd.Sum).tobytes()).hexdigest()
    outcome["transport"] = hvd.build_info()["transport"].split(";")[0]
    hvd.barrier()
elif scenario == "die":
    victim = size // 2 + 1
    x = np.ones(512, np.float32)
    for _ in range(3):
        hvd.allreduce(x)
    if rank == victim:
        time.sleep(0.5)
        os._exit(7)
    start = time.monotonic()
    try:
        while time.monotonic() - start < 120:
            hvd.allreduce(x)
    except Exception as exc:  # the test checks which error
        outcome["error"] = type(exc).__name__
        outcome["message"] = str(exc)
    outcome["seconds"] = time.monotonic() - start
elif scenario == "fd_limit":
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 8, open_now + 8))
    try:
        hvd.alltoall(np.arange(size, dtype=np.int32))
        outcome["error"] = None
    except Exception as exc:
        outcome["error"] = type(exc).__name__
        outcome["message"] = str(exc)
write()
if scenario == "die":  # a rank that handles the error lives on: its peers must not depend on its exit
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list(out_dir.glob("rank*.json"))) < size - 1:
        time.sleep(0.2)
sys.stdout.flush()
os._exit(0)
