"""One rank of the two-GPU plugin tests: argv = library rank size unique_id_hex mode.

Each rank drives its own GPU (device = rank) through the plugin. mode
"collectives" checks every collective against numpy (every dtype's sums and
products across ranks, wrapping as the CPU path does; int16 through 32 bits;
bool as or/and; out of place; a prescale folded into NCCL's PreMulSum);
"peer_death": rank 1 exits after one collective and rank 0's next one must
end in a peer failure or timeout within the timeout, then finalize cleanly.
A mismatch exits non-zero with the reason."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from devtools.cuda_driver import CudaDriver, numpy_dtype
from devtools.nccl_plugin_abi import DTYPES, Plugin, PluginError

TIMEOUT = 10.0


def rank_values(dtype: str, rank: int, n: int) -> np.ndarray:
    """Values whose sums and products across 2 ranks wrap in the small integer types."""
    base = np.arange(n) % 97 + rank * 50
    if dtype == "bool":
        return ((np.arange(n) + rank) % 3 == 0).astype(np.bool_)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        return (base % 17).astype(np.float32 if dtype == "bfloat16" else numpy_dtype(dtype))
    return (base * (1 if dtype == "uint8" else -1) ** rank).astype(numpy_dtype(dtype))


def expected(dtype: str, op: str, parts: list[np.ndarray]) -> np.ndarray:
    """The CPU path's reduction in numpy (integers wrap in their own type; bool is or/and)."""
    a, b = parts
    if dtype == "bool":
        return a & b if op in ("min", "product") else a | b
    with np.errstate(over="ignore"):
        return {"sum": a + b, "min": np.minimum(a, b), "max": np.maximum(a, b), "product": a * b}[op]


def collectives(p: Plugin, cuda: CudaDriver, rank: int, size: int) -> None:
    n = 1 << 12
    for dtype in DTYPES:
        if dtype == "bfloat16":
            continue  # float16 covers the 16-bit float path; bfloat16 runs in the one-rank tests
        for op in ("sum", "min", "max", "product"):
            parts = [rank_values(dtype, r, n) for r in range(size)]
            send = cuda.upload(parts[rank])
            out = cuda.alloc(parts[rank].nbytes)
            p.allreduce(send, n, dtype, op, out=out)  # out of place
            p.synchronize()
            np.testing.assert_array_equal(cuda.download(out, n, parts[rank].dtype), expected(dtype, op, parts))
            np.testing.assert_array_equal(cuda.download(send, n, parts[rank].dtype), parts[rank])
            cuda.free(send)
            cuda.free(out)

    # allreduce SUM and AVERAGE, with a prescale NCCL folds into the reduction
    ptr = cuda.upload(np.arange(n, dtype=np.float32) + rank)
    p.allreduce(ptr, n, "float32", "sum", prescale=0.5)
    p.synchronize()
    want = sum(np.arange(n, dtype=np.float32) + r for r in range(size)) * np.float32(0.5)
    np.testing.assert_array_equal(cuda.download(ptr, n, np.float32), want)
    p.allreduce(ptr, n, "float32", "average")
    p.synchronize()
    np.testing.assert_array_equal(cuda.download(ptr, n, np.float32), want)  # average of equal values

    # grouped allreduce: three buffers, MAX, out of place
    counts = [10, 0, 5000]
    ptrs = [cuda.upload(np.full(c, rank * 10 + i, dtype=np.int32)) for i, c in enumerate(counts)]
    outs = [cuda.alloc(max(c, 1) * 4) for c in counts]
    p.grouped_allreduce(ptrs, counts, "int32", "max", outs=outs)
    p.synchronize()
    for i, (c, q) in enumerate(zip(counts, outs, strict=True)):
        np.testing.assert_array_equal(cuda.download(q, c, np.int32), np.full(c, (size - 1) * 10 + i))

    # broadcast from the last rank
    b = cuda.upload(np.full(100, rank, dtype=np.float64))
    p.broadcast(b, 100, "float64", size - 1)
    p.synchronize()
    np.testing.assert_array_equal(cuda.download(b, 100, np.float64), np.full(100, size - 1))

    # allgatherv with uneven counts (rank r contributes 3*(r+1) copies of r), int16 bytes
    recv_counts = [3 * (r + 1) for r in range(size)]
    send = cuda.upload(np.full(recv_counts[rank], rank, dtype=np.int16))
    recv = cuda.alloc(sum(recv_counts) * 2)
    p.allgatherv(send, recv, recv_counts, "int16")
    p.synchronize()
    want_gather = np.concatenate([np.full(c, r) for r, c in enumerate(recv_counts)])
    np.testing.assert_array_equal(cuda.download(recv, sum(recv_counts), np.int16), want_gather)

    # alltoallv: rank r sends r+1+i copies of 100*r+i to rank i
    send_counts = [rank + 1 + i for i in range(size)]
    recv_counts = [i + 1 + rank for i in range(size)]
    s = cuda.upload(np.concatenate([np.full(c, 100 * rank + i, dtype=np.float32) for i, c in enumerate(send_counts)]))
    rv = cuda.alloc(sum(recv_counts) * 4)
    p.alltoallv(s, send_counts, rv, recv_counts, "float32")
    p.synchronize()
    want_all = np.concatenate([np.full(c, 100 * i + rank) for i, c in enumerate(recv_counts)]).astype(np.float32)
    np.testing.assert_array_equal(cuda.download(rv, sum(recv_counts), np.float32), want_all)


def peer_death(p: Plugin, cuda: CudaDriver, rank: int) -> None:
    ptr = cuda.upload(np.ones(1 << 20, dtype=np.float32))
    p.allreduce(ptr, 1 << 20, "float32")
    p.synchronize()  # the communicator works, then rank 1 goes away
    if rank == 1:
        os._exit(3)
    time.sleep(1)
    start = time.monotonic()
    try:
        p.allreduce(ptr, 1 << 20, "float32")
        p.synchronize()
        raise SystemExit("survivor: the collective with a dead peer succeeded")
    except PluginError as exc:
        took = time.monotonic() - start
        if exc.status not in ("peer", "timeout") or took > TIMEOUT + 5:
            raise SystemExit(f"survivor: wrong failure after {took:.1f}s: {exc.status}: {exc}") from None
        print(f"survivor: {exc.status} after {took:.1f}s: {exc}", flush=True)
    try:  # the communicator stays aborted: a peer failure at once, no hang
        p.allreduce(ptr, 1 << 20, "float32")
        raise SystemExit("survivor: a collective on the aborted communicator was accepted")
    except PluginError as exc:
        if exc.status != "peer":
            raise SystemExit(f"survivor: after the abort: {exc.status}: {exc}") from None


def main(library: str, rank: int, size: int, uid: bytes, mode: str) -> None:
    cuda = CudaDriver(rank)
    p = Plugin(Path(library))
    p.init(rank, size, uid, rank, TIMEOUT)
    if mode == "collectives":
        collectives(p, cuda, rank, size)
    else:
        peer_death(p, cuda, rank)
    start = time.monotonic()
    p.finalize()
    if time.monotonic() - start > TIMEOUT + 5:
        raise SystemExit("finalize took longer than the timeout")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4]), sys.argv[5])
