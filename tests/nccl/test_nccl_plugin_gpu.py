"""The plugin on a real GPU: every collective on device buffers, compared with
numpy. One rank needs one GPU; the two-rank test needs two (skipped else).

Run on a GPU machine with ``pytest tests/nccl --run-gpu`` (or
HVD_SELECTOR_RUN_GPU=1); needs nvcc 13 and nvidia-nccl-cu13 to build the
plugin, and the NVIDIA driver."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from devtools import hvd_nccl_build

from .cuda_driver import CudaDriver, from_bfloat16, numpy_dtype, to_bfloat16
from .nccl_helpers import ROOT
from .nccl_plugin_abi import DTYPES, Plugin, PluginError

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cuda() -> CudaDriver:
    return CudaDriver(0)


@pytest.fixture(scope="module")
def plugin(built_plugin: hvd_nccl_build.Built, cuda: CudaDriver) -> Iterator[Plugin]:
    p = Plugin(built_plugin.library)
    assert p.device_count() >= 1, p.error()
    p.init(0, 1, p.unique_id(), 0)
    yield p
    p.finalize()


def host_values(dtype: str, count: int, seed: int = 0) -> np.ndarray:
    """Small integers: exact in every dtype, so comparisons can be exact."""
    values = np.random.default_rng(seed).integers(-20, 20, size=count).astype(np.float32)
    if dtype == "bfloat16":
        return to_bfloat16(values)
    return values.astype(numpy_dtype(dtype))


def scaled(values: np.ndarray, dtype: str, factor: float) -> np.ndarray:
    """What the plugin's scale kernel computes, in numpy."""
    if factor == 1.0:
        return values
    if dtype == "bfloat16":
        return to_bfloat16(from_bfloat16(values) * np.float32(factor))
    if dtype in ("float16", "float32"):
        return (values.astype(np.float32) * np.float32(factor)).astype(values.dtype)
    if dtype == "float64":
        return values * factor
    return np.trunc(values.astype(np.float64) * factor).astype(values.dtype)


def test_device_and_compute_capability(plugin: Plugin, cuda: CudaDriver) -> None:
    assert plugin.device_count() == cuda.device_count()
    assert plugin.compute_capability(0) == cuda.compute_capability()
    assert "cuda_driver=none" not in plugin.versions()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "average", "min", "max", "product"])
def test_allreduce_with_scaling(plugin: Plugin, cuda: CudaDriver, dtype: str, op: str) -> None:
    values = host_values(dtype, 1000)
    ptr = cuda.upload(values)
    try:
        plugin.allreduce(ptr, values.size, dtype, op, prescale=2.0, postscale=0.25)
        plugin.synchronize()
        got = cuda.download(ptr, values.size, values.dtype)
    finally:
        cuda.free(ptr)
    # One rank: the reduction is the identity, AVERAGE divides by 1.
    expected = scaled(scaled(values, dtype, 2.0), dtype, 0.25)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64"])
def test_grouped_allreduce_packs_and_unpacks_every_buffer(plugin: Plugin, cuda: CudaDriver, dtype: str) -> None:
    # 40 buffers: more than one kernel batch (32), with an empty one and a large one.
    counts = [int(c) for c in np.random.default_rng(1).integers(1, 3000, size=40)]
    counts[5] = 0
    counts[7] = 300_000
    arrays = [host_values(dtype, c, seed=i) for i, c in enumerate(counts)]
    ptrs = [cuda.upload(a) for a in arrays]
    try:
        plugin.grouped_allreduce(ptrs, counts, dtype, "average", prescale=4.0, postscale=0.5)
        plugin.grouped_allreduce(ptrs, counts, dtype, "sum")  # reuses the fusion buffer
        plugin.synchronize()
        for array, ptr in zip(arrays, ptrs, strict=True):
            got = cuda.download(ptr, array.size, array.dtype)
            np.testing.assert_array_equal(got, scaled(scaled(array, dtype, 4.0), dtype, 0.5))
    finally:
        for ptr in ptrs:
            cuda.free(ptr)


def test_broadcast_allgatherv_alltoallv_single_rank(plugin: Plugin, cuda: CudaDriver) -> None:
    values = host_values("float64", 777)
    buf, recv = cuda.upload(values), cuda.upload(np.zeros_like(values))
    try:
        plugin.broadcast(buf, values.size, "float64", 0)
        plugin.allgatherv(buf, recv, [values.size], "float64")
        plugin.synchronize()
        np.testing.assert_array_equal(cuda.download(recv, values.size, np.float64), values)
        other = cuda.upload(np.zeros_like(values))
        try:
            plugin.alltoallv(buf, [values.size], other, [values.size], "float64")
            plugin.synchronize()
            np.testing.assert_array_equal(cuda.download(other, values.size, np.float64), values)
        finally:
            cuda.free(other)
    finally:
        cuda.free(buf)
        cuda.free(recv)


def test_bad_root_and_dtype_are_one_line_errors(plugin: Plugin, cuda: CudaDriver) -> None:
    ptr = cuda.alloc(16)
    try:
        with pytest.raises(PluginError, match=r"^broadcast: root 1 is not in \[0, 1\)$"):
            plugin.broadcast(ptr, 4, "float32", 1)
        with pytest.raises(PluginError, match=r"^unknown dtype 9$"):
            plugin.check(plugin.table.allreduce(ptr, 4, 9, 0, 1.0, 1.0, None))
    finally:
        cuda.free(ptr)


def test_finalize_then_init_again(plugin: Plugin) -> None:
    plugin.finalize()
    plugin.init(0, 1, plugin.unique_id(), 0)
    with pytest.raises(PluginError, match="already initialized"):
        plugin.init(0, 1, plugin.unique_id(), 0)


def test_two_ranks_on_two_gpus(built_plugin: hvd_nccl_build.Built, plugin: Plugin, cuda: CudaDriver) -> None:
    if cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    uid = plugin.unique_id().hex()
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the worker imports tests.nccl.*
    worker = HERE / "nccl_gpu_worker.py"
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(built_plugin.library), str(r), "2", uid],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"rank {rank}: {out}"
