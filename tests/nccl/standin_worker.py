"""One rank of a stand-in job: python standin_worker.py OUT_DIR SCENARIO.

Runs under ``hvd-selector run`` with the nccl variant whose libhvd_nccl.so is
the stand-in plugin (tests/nccl/standin/), so "GPU" tensors (DeviceArray:
host memory presented as CUDA) take the core's whole GPU path. Each rank
writes what it saw to OUT_DIR/rank<r>.json; the tests compare.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import hvd_selector as hvd
from hvd_selector import _core
from selector_backend.files.atomic import atomic_write_text
from tests.native.workers.fake_cuda import DeviceArray

DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "int8", "int16", "bool"]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
SCALES = [(1.0, 1.0), (0.5, 1.0), (1.0, 0.25), (2.0, 0.5), (0.1, 1.0)]


def values(dtype: str, count: int, seed: int) -> np.ndarray:
    """Values whose scaling stays in range, so CPU and GPU must agree bit for bit
    (sums and products do wrap around in the small integer types: that is part
    of what both paths must agree on)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    limit = {"uint8": (0, 100), "int8": (-60, 60), "int16": (-300, 300)}.get(dtype, (-1000, 1000))
    ints = rng.integers(limit[0], limit[1], count)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        floats = (ints % 81 - 40).astype(np.float32) / 4  # quarters in [-10, 10]: exact in every float type
        if dtype == "bfloat16":
            return (floats.view(np.uint32) >> 16).astype(np.uint16)
        return floats.astype(dtype)
    return ints.astype(dtype)


def gpu(host: np.ndarray, dtype: str) -> DeviceArray:
    return DeviceArray(host.copy(), dtype)


def cpu(host: np.ndarray, dtype: str) -> DeviceArray:
    return DeviceArray(host.copy(), dtype, device="cpu")


def same(a: DeviceArray, b: DeviceArray) -> bool:
    return a.shape == b.shape and a.host.tobytes() == b.host.tobytes()


def gpu_factor(dtype: str, factor: float) -> float:
    """The factor the GPU path scales by: float16's rounded to float16 (Horovod's GPU rule, plan.h)."""
    return float(np.float16(factor)) if dtype == "float16" else factor


def reductions(rank: int) -> dict[str, Any]:
    """Every dtype x op x scaling, out of place and in place, against the CPU path (given the GPU's factors)."""
    bad, runs = [], 0
    for dtype in DTYPES:
        for name, op in OPS.items():
            for pre, post in SCALES:
                for in_place in (False, True):
                    host = values(dtype, 37, seed=runs * 10 + rank)
                    want = cpu(host, dtype)
                    _core.allreduce(cpu(host, dtype), want, op, gpu_factor(dtype, pre), gpu_factor(dtype, post))
                    x = gpu(host, dtype)
                    out = x if in_place else x.new_empty(x.shape)
                    _core.allreduce(x, out, op, pre, post)
                    runs += 1
                    if not same(out, want) or (not in_place and x.host.tobytes() != host.tobytes()):
                        bad.append(f"{dtype} {name} pre={pre} post={post} in_place={in_place}")
    return {"runs": runs, "bad": bad}


def grouped(rank: int) -> dict[str, Any]:
    """Fused lists mixing dtypes and devices, chunked by small and large thresholds."""
    layout = [
        ("float32", "cuda", 5),
        ("float32", "cuda", 300),
        ("float32", "cpu", 7),
        ("int16", "cuda", 40),
        ("bool", "cuda", 9),
        ("float16", "cuda", 0),
        ("bfloat16", "cuda", 64),
        ("int8", "cuda", 33),
    ]
    bad, runs = [], 0
    for threshold in (64, 1 << 20):
        _core.set_fusion_threshold(threshold)
        for name, op in OPS.items():
            for pre, post in ((1.0, 1.0), (0.5, 0.25)):
                for in_place in (False, True):
                    hosts = [values(d, n, seed=runs * 100 + i * 10 + rank) for i, (d, _, n) in enumerate(layout)]
                    ins = [DeviceArray(h.copy(), d, device=dev) for h, (d, dev, _) in zip(hosts, layout, strict=True)]
                    outs = ins if in_place else [t.new_empty(t.shape) for t in ins]
                    refs = [cpu(h, d) for h, (d, _, _) in zip(hosts, layout, strict=True)]
                    wants = [t.new_empty(t.shape) for t in refs]
                    _core.grouped_allreduce(refs, wants, op, pre, post)
                    _core.grouped_allreduce(ins, outs, op, pre, post)
                    runs += 1
                    for i, (o, w) in enumerate(zip(outs, wants, strict=True)):
                        if not same(o, w):
                            bad.append(f"threshold={threshold} {name} pre={pre} in_place={in_place} tensor {i}")
    return {"runs": runs, "bad": bad}


def moves(rank: int) -> dict[str, Any]:
    """allgather (uneven rows), broadcast, alltoall (uneven splits) in every dtype, through the Python API."""
    bad = []
    for i, dtype in enumerate(DTYPES):
        rows = values(dtype, (2 + rank) * 3, seed=i * 10 + rank).reshape(2 + rank, 3)
        for what, host, call in (
            ("allgather", rows, lambda t: hvd.allgather(t)),
            ("broadcast", rows[:2], lambda t: hvd.broadcast(t, root_rank=1)),  # one shape on every rank
            ("alltoall", rows, lambda t: hvd.alltoall(t, splits=[1, 1 + rank])),
        ):
            got, want = call(gpu(host, dtype)), call(cpu(host, dtype))
            if type(got) is not DeviceArray or not got.is_cuda or not same(got, want):
                bad.append(f"{what} {dtype}")
    return {"bad": bad}


def api(rank: int) -> dict[str, Any]:
    """hvd.allreduce / grouped_allreduce on GPU tensors: new outputs, inputs untouched, no copy on the way."""
    x = gpu(np.arange(6, dtype=np.float32) + rank, "float32")
    y = hvd.allreduce(x, op=hvd.Average, prescale_factor=0.5)
    xs = [gpu(np.full(4, rank + i, np.float32), "float32") for i in range(3)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    return {
        "y": y.host.tolist(),
        "x": x.host.tolist(),
        "y_is_gpu": type(y) is DeviceArray and y.is_cuda,
        "pointers": [x.host.ctypes.data, y.host.ctypes.data],
        "ys": [t.host.tolist() for t in ys],
        "xs": [t.host.tolist() for t in xs],
        "grouped_pointers": [[a.host.ctypes.data, b.host.ctypes.data] for a, b in zip(xs, ys, strict=True)],
    }


def attempt(fn: Callable[[], Any]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        fn()
        outcome: dict[str, Any] = {"error": None}
    except Exception as exc:  # the point: which exception, with what text
        outcome = {"error": type(exc).__name__, "message": str(exc)}
    outcome["seconds"] = time.monotonic() - start
    return outcome


def gpu_op() -> None:
    x = gpu(np.ones(8, np.float32), "float32")
    hvd.allreduce(x, op=hvd.Sum)


def peer_failure(rank: int, scenario: str) -> dict[str, Any]:
    """Rank 1 fails somewhere; every rank still standing reports what its next GPU op, the
    GPU op after it and a CPU op raised, then shuts down cleanly.

    die_after_init / die_after_gpu_op: rank 1 exits between collectives. die_inside /
    stall_inside: rank 1 exits or hangs inside its 2nd plugin collective (the stand-in's
    HVD_STANDIN_EXIT_AT / HVD_STANDIN_STALL_AT=1:2), after a first one made the communicator.
    """
    if scenario in ("die_after_gpu_op", "die_inside", "stall_inside"):
        gpu_op()
    if rank == 1 and scenario in ("die_after_init", "die_after_gpu_op"):
        os._exit(3)
    return {
        "first": attempt(gpu_op),
        "second": attempt(gpu_op),
        "cpu": attempt(lambda: hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum).tolist()),
    }


def finalize_during(rank: int, scenario: str) -> dict[str, Any]:
    """Rank 0 shuts down while another of its threads is still inside a collective that
    rank 1 does not finish: a CPU one (rank 1 never calls it, then exits) or a GPU one
    (rank 1 hangs inside the plugin: HVD_STANDIN_STALL_AT=1:2). Shutdown must wait for the
    thread, which gets its error, instead of freeing the communicator under it."""
    on_gpu = scenario == "finalize_during_plugin"
    if on_gpu:
        gpu_op()  # the communicator exists on both ranks
    if rank == 1:
        return {"op": attempt(gpu_op)} if on_gpu else {"slept": time.sleep(1.0)}
    seen: dict[str, Any] = {}

    def inside() -> None:
        seen["op"] = attempt(gpu_op if on_gpu else lambda: hvd.allreduce(np.ones(4, np.float32)))

    thread = threading.Thread(target=inside, daemon=True)
    thread.start()
    time.sleep(0.5)
    start = time.monotonic()
    hvd.shutdown()
    seen["shutdown_seconds"] = time.monotonic() - start
    thread.join(60)
    seen["thread_done"] = not thread.is_alive()
    return seen


def wrong_device(rank: int) -> dict[str, Any]:
    return attempt(lambda: hvd.allreduce(DeviceArray(np.ones(4, np.float32), device_id=1)))


def no_unique_id(rank: int) -> dict[str, Any]:
    """Rank 0 cannot make the NCCL id: every rank says why, and CPU work goes on."""
    return {"gpu": attempt(gpu_op), "cpu": hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum).tolist()}


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "reductions": reductions,
    "grouped": grouped,
    "moves": moves,
    "api": api,
    "wrong_device": wrong_device,
    "no_unique_id": no_unique_id,
}


def main(out_dir: Path, scenario: str) -> None:
    hvd.init()
    rank = hvd.rank()
    if scenario in SCENARIOS:
        outcome = SCENARIOS[scenario](rank)
    elif scenario.startswith("finalize_during"):
        outcome = finalize_during(rank, scenario)
    else:
        outcome = peer_failure(rank, scenario)
    hvd.shutdown()
    outcome["clean_shutdown"] = True
    atomic_write_text(out_dir / f"rank{rank}.json", json.dumps(outcome))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
