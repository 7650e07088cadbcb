"""Every op and dtype on 2 and 4 ranks for gloo, MPICH and Open MPI builds,
compared with numpy's exact answer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from devtools.native_builds import Build

from . import cases
from .native_helpers import launch

pytestmark = pytest.mark.slow
TORCH_INSTALLED = importlib.util.find_spec("torch") is not None  # then the jobs that ask check torch's tensors too


def results(
    build: Build, np_: int, tmp_path: Path, hosts: int, with_torch: bool, **env: str
) -> list[dict[str, np.ndarray]]:
    """Run workers/collectives.py on ``hosts`` pretend hosts and load every rank's results; without
    torch, only numpy's arrays."""
    args = [str(hosts)] + ([] if with_torch else ["numpy"])
    proc = launch(build, np_, "collectives.py", str(tmp_path), *args, cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = []
    for r in range(np_):
        with np.load(tmp_path / f"rank{r}.npz") as data:
            out.append({k.replace("|", "/"): data[k] for k in data.files})
    return out


def _same(got: np.ndarray, want: np.ndarray, key: str) -> None:
    assert got.dtype == want.dtype, f"{key}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{key}: shape {got.shape} != {want.shape}"
    assert np.array_equal(got, want), f"{key}: {got.ravel()[:8]} != {want.ravel()[:8]}"


@pytest.mark.parametrize("np_", [2, 4])
def test_every_op_and_dtype(any_build: Build, np_: int, tmp_path: Path) -> None:
    """torch's tensors ride on the 2-rank jobs only: the adapter converts them the same way at any
    size, and importing torch costs each rank about 2 CPU-s (numpy's arrays cover the 4-rank sums)."""
    check_every_op_and_dtype(any_build, np_, tmp_path, with_torch=TORCH_INSTALLED and np_ == 2)


def check_every_op_and_dtype(
    build: Build, np_: int, tmp_path: Path, hosts: int = 1, with_torch: bool = TORCH_INSTALLED, **env: str
) -> None:
    """A job of ``np_`` ranks on ``hosts`` pretend hosts: every rank's results equal numpy's exact
    answers (and torch's, ``with_torch``: then they must be there)."""
    for rank, got in enumerate(results(build, np_, tmp_path, hosts, with_torch, **env)):
        for dtype in cases.NUMPY_DTYPES:
            for op in cases.OPS:
                for pre, post in cases.SCALES:
                    key = f"allreduce/{dtype}/{op}/{pre}/{post}"
                    _same(got[key], cases.expected_allreduce(np_, dtype, op, pre, post), key)
            _same(got[f"allgather/{dtype}"], cases.expected_allgather(np_, dtype), f"allgather/{dtype}")
            _same(got[f"broadcast/{dtype}"], cases.cast(cases.gather_rows(np_ - 1), dtype), f"broadcast/{dtype}")
            _same(got[f"alltoall/{dtype}"], cases.cast(cases.expected_alltoall(rank, np_), dtype), f"alltoall/{dtype}")
        even = np.concatenate([np.arange(2 * rank, 2 * rank + 2, dtype=np.int32) + 10 * src for src in range(np_)])
        _same(got["alltoall_even"], even, "alltoall_even")
        for dtype in cases.NUMPY_DTYPES:
            for op in cases.OPS:
                key = f"allreduce_big/{dtype}/{op}"
                _same(got[key], cases.expected_allreduce(np_, dtype, op, 1.0, 1.0, cases.BIG), key)
            rows = np.concatenate([cases.big_rows(r) for r in range(np_)])
            _same(got[f"allgather_big/{dtype}"], cases.cast(rows, dtype), f"allgather_big/{dtype}")
            want_b = cases.cast(cases.big_rows(np_ - 1), dtype)
            _same(got[f"broadcast_big/{dtype}"], want_b, f"broadcast_big/{dtype}")
        want = cases.expected_allreduce(np_, "float32", "Sum", 1.0, 1.0, cases.BIG)
        _same(got["allreduce_big_/float32/Sum"], want, "allreduce_ (big)")
        want = cases.expected_allreduce(np_, "float32", "Sum", 1.0, 1.0)
        _same(got["allreduce_/float32/Sum"], want, "allreduce_")
        for small in (False, True):
            for op in ("Sum", "Average"):
                for i, (shape, dtype) in enumerate(cases.group_shapes()):
                    key = f"grouped/{small}/{op}/{i}"
                    _same(got[key], cases.expected_group(np_, i, shape, dtype, op), key)
                    if i < 21:  # all float32: one flat result array
                        key = f"grouped1/{small}/{op}/{i}"
                        _same(got[key], cases.expected_group(np_, i, shape, dtype, op), key)
        types = json.loads((tmp_path / f"types{rank}.json").read_text())
        assert bool(types) == with_torch, types
        for dtype in cases.TORCH_DTYPES if with_torch else ():
            for op in cases.OPS:
                key = f"torch/allreduce/{dtype}/{op}"
                assert types[key] == f"torch.Tensor:torch.{dtype}", key
                want = cases.expected_allreduce(np_, dtype, op, 1.0, 1.0)
                _same(got[key], want, key)
            key = f"torch/allgather/{dtype}"
            assert types[key] == f"torch.Tensor:torch.{dtype}", key
            torch = pytest.importorskip("torch")
            want = torch.tensor(cases.expected_allgather(np_, "float64"), dtype=getattr(torch, dtype))
            _same(got[key], want.float().numpy(), key)
