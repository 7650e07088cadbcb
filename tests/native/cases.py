"""Deterministic per-rank inputs and numpy's exact answers for the collectives.

Shared by the worker scripts (which run the collectives under the launcher)
and the tests (which compute what every rank must have received). Values are
small integers and scale factors powers of two, so every dtype — float16 and
bfloat16 included — represents inputs, partial sums and results exactly.
"""

from __future__ import annotations

import numpy as np

NUMPY_DTYPES = ("float16", "float32", "float64", "int32", "int64")
TORCH_DTYPES = ("bfloat16", "float16", "float32", "int64")
OPS = {"Sum": 0, "Average": 1, "Min": 2, "Max": 3, "Product": 4}
SCALES = ((1.0, 1.0), (2.0, 0.5))
INTEGER = ("int32", "int64")


def values(rank: int, n: int = 37, salt: int = 0) -> np.ndarray:
    """Small integers in [-2, 4] that differ per rank and position."""
    i = np.arange(n, dtype=np.int64)
    return (((i * (rank + 3) + rank + salt) % 7) - 2).astype(np.float64)


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in INTEGER:
        return np.trunc(x).astype(dtype)
    if dtype == "bfloat16":
        return x.astype(np.float32)  # exact for these values
    return x.astype(dtype)


def expected_allreduce(size: int, dtype: str, op: str, pre: float, post: float, n: int = 37) -> np.ndarray:
    xs = [np.trunc(values(r, n) * pre) if dtype in INTEGER else values(r, n) * pre for r in range(size)]
    stack = np.stack(xs)
    if op in ("Sum", "Average"):
        acc = stack.sum(axis=0)
    elif op == "Min":
        acc = stack.min(axis=0)
    elif op == "Max":
        acc = stack.max(axis=0)
    else:
        acc = stack.prod(axis=0)
    factor = post / size if op == "Average" else post
    if factor != 1.0:
        acc = np.trunc(acc * factor) if dtype in INTEGER else acc * factor
    return cast(acc, dtype)


BIG = 70_001  # elements: past the inline payload limit, odd so shares are uneven


def big_rows(rank: int) -> np.ndarray:
    """Rank r contributes 20,000 * (r + 1) + 1 rows of 2 (rank r's rows end in r)."""
    n = 20_000 * (rank + 1) + 1
    return ((np.arange(2 * n, dtype=np.float64) % 11) + rank).reshape(n, 2)


def gather_rows(rank: int) -> np.ndarray:
    """Rank r contributes r+1 rows of 3."""
    return np.arange((rank + 1) * 3, dtype=np.float64).reshape(rank + 1, 3) + 100 * rank


def expected_allgather(size: int, dtype: str) -> np.ndarray:
    return cast(np.concatenate([gather_rows(r) for r in range(size)]), dtype)


def alltoall_splits(rank: int, size: int) -> list[int]:
    return [(dst + rank) % 3 for dst in range(size)]


def alltoall_input(rank: int, size: int) -> np.ndarray:
    """Row k going to rank d encodes (src, dst, k) as src*100 + dst*10 + k."""
    rows = []
    for dst, count in enumerate(alltoall_splits(rank, size)):
        rows += [[rank * 100 + dst * 10 + k, -1.0] for k in range(count)]
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def expected_alltoall(rank: int, size: int) -> np.ndarray:
    rows = []
    for src in range(size):
        count = alltoall_splits(src, size)[rank]
        rows += [[src * 100 + rank * 10 + k, -1.0] for k in range(count)]
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def group_shapes() -> list[tuple[tuple[int, ...], str]]:
    """Mixed shapes and dtypes for grouped_allreduce (exercises dtype runs)."""
    dtypes = ("float32", "float32", "int64", "float16", "float64")
    return [((i % 5 + 1, 3) if i % 2 else (i % 7 + 1,), dtypes[i % 5 if i > 20 else 0]) for i in range(40)]


def group_input(rank: int, index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    return cast(values(rank, n, salt=index).reshape(shape), dtype)


def expected_group(size: int, index: int, shape: tuple[int, ...], dtype: str, op: str) -> np.ndarray:
    n = int(np.prod(shape))
    stack = np.stack([values(r, n, salt=index) for r in range(size)])
    acc = stack.sum(axis=0)
    if op == "Average":
        acc = np.trunc(acc / size) if dtype in INTEGER else acc / size
    return cast(acc.reshape(shape), dtype)
