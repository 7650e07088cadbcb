"""One rank of the two-GPU plugin test: argv = library rank size unique_id_hex.

Each rank drives its own GPU (device = rank) through the plugin and checks
every collective against numpy; a mismatch exits non-zero with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tests.nccl.cuda_driver import CudaDriver
from tests.nccl.nccl_plugin_abi import Plugin


def main(library: str, rank: int, size: int, uid: bytes) -> None:
    cuda = CudaDriver(rank)
    p = Plugin(Path(library))
    p.init(rank, size, uid, rank)
    n = 1 << 16

    def roundtrip(array: np.ndarray) -> int:
        return cuda.upload(array)

    # allreduce SUM and AVERAGE
    ptr = roundtrip(np.arange(n, dtype=np.float32) + rank)
    p.allreduce(ptr, n, "float32", "sum")
    p.synchronize()
    expected = sum(np.arange(n, dtype=np.float32) + r for r in range(size))
    np.testing.assert_array_equal(cuda.download(ptr, n, np.float32), expected)
    p.allreduce(ptr, n, "float32", "average")
    p.synchronize()
    np.testing.assert_array_equal(cuda.download(ptr, n, np.float32), expected)  # average of equal values

    # grouped allreduce: three buffers, MAX
    counts = [10, 0, 5000]
    ptrs = [roundtrip(np.full(c, rank * 10 + i, dtype=np.int32)) for i, c in enumerate(counts)]
    p.grouped_allreduce(ptrs, counts, "int32", "max")
    p.synchronize()
    for i, (c, q) in enumerate(zip(counts, ptrs, strict=True)):
        np.testing.assert_array_equal(cuda.download(q, c, np.int32), np.full(c, (size - 1) * 10 + i))

    # broadcast from the last rank
    b = roundtrip(np.full(100, rank, dtype=np.float64))
    p.broadcast(b, 100, "float64", size - 1)
    p.synchronize()
    np.testing.assert_array_equal(cuda.download(b, 100, np.float64), np.full(100, size - 1))

    # allgatherv with uneven counts (rank r contributes 3*(r+1) copies of r)
    recv_counts = [3 * (r + 1) for r in range(size)]
    send = roundtrip(np.full(recv_counts[rank], rank, dtype=np.int64))
    recv = cuda.alloc(sum(recv_counts) * 8)
    p.allgatherv(send, recv, recv_counts, "int64")
    p.synchronize()
    want = np.concatenate([np.full(c, r) for r, c in enumerate(recv_counts)])
    np.testing.assert_array_equal(cuda.download(recv, sum(recv_counts), np.int64), want)

    # alltoallv: rank r sends r+1+i copies of 100*r+i to rank i
    send_counts = [rank + 1 + i for i in range(size)]
    recv_counts = [i + 1 + rank for i in range(size)]
    s = roundtrip(np.concatenate([np.full(c, 100 * rank + i, dtype=np.float32) for i, c in enumerate(send_counts)]))
    rv = cuda.alloc(sum(recv_counts) * 4)
    p.alltoallv(s, send_counts, rv, recv_counts, "float32")
    p.synchronize()
    want = np.concatenate([np.full(c, 100 * i + rank) for i, c in enumerate(recv_counts)]).astype(np.float32)
    np.testing.assert_array_equal(cuda.download(rv, sum(recv_counts), np.float32), want)
    p.finalize()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4]))
