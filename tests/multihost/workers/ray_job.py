"""A Ray driver: python ray_job.py HEAD_ADDRESS OUT_DIR MODE (run inside the head's namespace host).

MODE "reduce": RayExecutor on 3 hosts x 2 workers; every rank allreduces,
allgathers and broadcasts integer-valued data (exact in any order) and reports
its transport, its node and the TCP peers of its own connections; the driver
writes what it got to OUT_DIR/result.json. MODE "kill" (3 hosts x 1 worker): rank 1 SIGKILLs itself
mid-training (an actor dies); the others record what their collective raised;
the driver records what run() raised and how long after the kill.
"""

import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np
import ray

head, out_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
HOSTS = 3
PER_HOST = {"reduce": 2, "kill": 1}[mode]
STEPS_BEFORE_KILL = 20


def tcp_peers() -> list[str]:
    """Remote addresses of this process's namespace's established IPv4 TCP connections."""
    peers = []
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] != "01":  # ESTABLISHED
            continue
        address = fields[2].split(":")[0]
        peers.append(socket.inet_ntoa(struct.pack("<I", int(address, 16))))
    return sorted(set(peers))


def data(rank: int) -> np.ndarray:
    return (np.arange(1013, dtype=np.float64) * (rank + 1) - 500 * rank) % 997


def reduce_job() -> dict:
    import hvd_selector as hvd

    hvd.init()
    rank = hvd.rank()
    summed = hvd.allreduce(data(rank), op=hvd.Sum)
    gathered = hvd.allgather(np.full(2, rank, dtype=np.int64))
    sent = hvd.broadcast(np.arange(5, dtype=np.int64) * 7 if rank == 2 else np.zeros(5, dtype=np.int64), root_rank=2)
    return {
        "rank": rank,
        "size": hvd.size(),
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
        "sum": summed.tolist(),
        "gathered": gathered.tolist(),
        "broadcast": sent.tolist(),
        "transport": hvd.build_info()["transport"],
        "node": ray.util.get_node_ip_address(),
        "peers": tcp_peers(),
    }


def kill_job(out: str) -> str:
    import hvd_selector as hvd

    hvd.init()
    rank, step = hvd.rank(), 0
    try:
        while True:
            if rank == 1 and step == STEPS_BEFORE_KILL:
                Path(out, "killed.json").write_text(json.dumps({"time": time.time(), "pid": os.getpid()}))
                os.kill(os.getpid(), signal.SIGKILL)  # the actor dies, as on a lost node
            hvd.allreduce(np.ones(1000), op=hvd.Sum)
            step += 1
    except Exception as exc:  # the point: what a survivor's collective raises
        record = {"error": type(exc).__name__, "message": str(exc), "time": time.time(), "step": step}
        Path(out, f"rank{rank}.json").write_text(json.dumps(record))
        raise


ray.init(address=f"{head}:6379", _node_ip_address=head, configure_logging=False, log_to_driver=False)
from hvd_selector.ray import RayExecutor  # noqa: E402  (after ray.init: the module needs no cluster, only ray)

result: dict = {}
start = time.monotonic()
executor = RayExecutor(RayExecutor.create_settings(timeout_s=6), num_hosts=HOSTS, num_workers_per_host=PER_HOST)
executor.start()
result["start_s"] = time.monotonic() - start
if mode == "reduce":
    result["ranks"] = executor.run(reduce_job)
    result["expected_sum"] = sum(data(r) for r in range(HOSTS * PER_HOST)).tolist()
    result["worker_hosts"] = executor.worker_hosts()
    executor.shutdown()
else:
    try:
        executor.run(kill_job, args=[str(out_dir)])
        result["raised"] = None
    except Exception as exc:
        result["raised"] = type(exc).__name__
        result["message"] = str(exc)
        result["raised_at"] = time.time()
    result["after_failure_started"] = bool(executor.worker_hosts())
result["run_s"] = time.monotonic() - start
ray.shutdown()
(out_dir / "result.json").write_text(json.dumps(result))
