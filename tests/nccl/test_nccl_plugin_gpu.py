"""The plugin on a real GPU: every collective, dtype and op on device buffers, in
place and out of place, compared with what the CPU path computes (in numpy);
prescale folded into NCCL's PreMulSum or not; abort, and an init that a rank
never joins. One rank needs one GPU; the two-rank tests (every dtype's wrap
and logic across ranks, a peer dying) need two (skipped else).

Run on a GPU machine with ``pytest tests/nccl --run-gpu`` (or
HVD_SELECTOR_RUN_GPU=1); needs nvcc 13 and nvidia-nccl-cu13 to build the
plugin, and the NVIDIA driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from devtools import hvd_nccl_build
from devtools.cuda_driver import CudaDriver, from_bfloat16, numpy_dtype, to_bfloat16
from devtools.nccl_plugin_abi import DTYPES, Plugin, PluginError

from .nccl_helpers import ROOT

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
    """Small values: exact in every dtype and in range after the scalings below, so
    comparisons can be exact (bfloat16 as its raw bits)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=count).astype(np.bool_)
    low, high = {"uint8": (0, 40), "int8": (-20, 20)}.get(dtype, (-20, 20))
    values = rng.integers(low, high, size=count).astype(np.float32)
    if dtype == "bfloat16":
        return to_bfloat16(values)
    return values.astype(numpy_dtype(dtype))


def scaled(values: np.ndarray, dtype: str, factor: float) -> np.ndarray:
    """What the GPU path's scaling computes, in numpy: the CPU path's (kernels_cpu.cpp), but float16 by the
    factor rounded to float16 (Horovod's GPU rule, native/nccl/plan.h)."""
    if factor == 1.0 or dtype == "bool":
        return values
    if dtype == "bfloat16":
        return to_bfloat16(from_bfloat16(values) * np.float32(factor))
    if dtype == "float16":
        return (values.astype(np.float32) * np.float32(np.float16(factor))).astype(values.dtype)
    if dtype == "float32":
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
@pytest.mark.parametrize("out_of_place", [False, True])
@pytest.mark.parametrize(("pre", "post"), [(2.0, 0.25), (0.1, 1.0)])
def test_allreduce_every_dtype_and_op_with_scaling(
    plugin: Plugin, cuda: CudaDriver, dtype: str, op: str, out_of_place: bool, pre: float, post: float
) -> None:
    values = host_values(dtype, 1000)
    ptr = cuda.upload(values)
    out = cuda.alloc(values.nbytes) if out_of_place else None
    try:
        plugin.allreduce(ptr, values.size, dtype, op, prescale=pre, postscale=post, out=out)
        plugin.synchronize()
        got = cuda.download(out if out is not None else ptr, values.size, values.dtype)
        untouched = cuda.download(ptr, values.size, values.dtype)
    finally:
        cuda.free(ptr)
        if out is not None:
            cuda.free(out)
    # One rank: the reduction is the identity, AVERAGE divides by 1; every scaling is a kernel pass
    # (plan.h never folds a prescale into a PreMulSum at one rank).
    expected = scaled(scaled(values, dtype, pre), dtype, post)
    np.testing.assert_array_equal(got, expected)
    if out_of_place:
        np.testing.assert_array_equal(untouched, values)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("pre", [0.5, 0.1])
def test_prescale_in_the_reduction_or_in_a_pass_gives_the_same_bits(
    built_plugin: hvd_nccl_build.Built, plugin: Plugin, cuda: CudaDriver, dtype: str, pre: float
) -> None:
    """HVD_SELECTOR_NCCL_PREMULSUM=0 (read at init) scales in a separate kernel pass; at one rank so does =1.

    4913 (17**3) elements: the size at which NCCL 2.28.9's one-rank PreMulSum left one float32
    element unscaled on an H200, which is why plan.h does not fold at one rank.
    """
    values = host_values(dtype, 17**3, seed=3)
    results = []
    for setting in ("1", "0"):
        plugin.finalize()
        os.environ["HVD_SELECTOR_NCCL_PREMULSUM"] = setting
        try:
            plugin.init(0, 1, plugin.unique_id(), 0)
        finally:
            del os.environ["HVD_SELECTOR_NCCL_PREMULSUM"]
        ptr = cuda.upload(values)
        try:
            plugin.allreduce(ptr, values.size, dtype, "sum", prescale=pre)
            plugin.synchronize()
            results.append(cuda.download(ptr, values.size, values.dtype))
        finally:
            cuda.free(ptr)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], scaled(values, dtype, pre))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "int16", "bool", "uint8"])
@pytest.mark.parametrize("out_of_place", [False, True])
def test_grouped_allreduce_packs_and_unpacks_every_buffer(
    plugin: Plugin, cuda: CudaDriver, dtype: str, out_of_place: bool
) -> None:
    # 40 buffers: more than one kernel batch (32), with an empty one and a large one.
    counts = [int(c) for c in np.random.default_rng(1).integers(1, 3000, size=40)]
    counts[5] = 0
    counts[7] = 300_000
    arrays = [host_values(dtype, c, seed=i) for i, c in enumerate(counts)]
    ptrs = [cuda.upload(a) for a in arrays]
    outs = [cuda.alloc(a.nbytes) for a in arrays] if out_of_place else None
    try:
        plugin.grouped_allreduce(ptrs, counts, dtype, "average", prescale=4.0, postscale=0.5, outs=outs)
        if not out_of_place:
            plugin.grouped_allreduce(ptrs, counts, dtype, "sum")  # reuses the fusion buffer
        plugin.synchronize()
        for i, (array, ptr) in enumerate(zip(arrays, ptrs, strict=True)):
            got = cuda.download(outs[i] if outs else ptr, array.size, array.dtype)
            np.testing.assert_array_equal(got, scaled(scaled(array, dtype, 4.0), dtype, 0.5))
            if outs:
                np.testing.assert_array_equal(cuda.download(ptr, array.size, array.dtype), array)
    finally:
        for ptr in ptrs + (outs or []):
            cuda.free(ptr)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_broadcast_allgatherv_alltoallv_single_rank(plugin: Plugin, cuda: CudaDriver, dtype: str) -> None:
    values = host_values(dtype, 777)
    buf, recv = cuda.upload(values), cuda.upload(np.zeros_like(values))
    try:
        plugin.broadcast(buf, values.size, dtype, 0)
        plugin.allgatherv(buf, recv, [values.size], dtype)
        plugin.synchronize()
        np.testing.assert_array_equal(cuda.download(recv, values.size, values.dtype), values)
        other = cuda.upload(np.zeros_like(values))
        try:
            plugin.alltoallv(buf, [values.size], other, [values.size], dtype)
            plugin.synchronize()
            np.testing.assert_array_equal(cuda.download(other, values.size, values.dtype), values)
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
        with pytest.raises(PluginError, match=r"^unknown dtype 10$") as bad:
            plugin.check(plugin.table.allreduce(ptr, ptr, 4, 10, 0, 1.0, 1.0, None))
        assert bad.value.status == "invalid"
        with pytest.raises(PluginError, match=r"^unknown reduction op 7$"):
            plugin.check(plugin.table.allreduce(ptr, ptr, 4, 2, 7, 1.0, 1.0, None))
        plugin.allreduce(ptr, 4, "float32")  # the communicator survived bad arguments
        plugin.synchronize()
    finally:
        cuda.free(ptr)


def test_finalize_then_init_again(plugin: Plugin) -> None:
    plugin.finalize()
    plugin.init(0, 1, plugin.unique_id(), 0)
    with pytest.raises(PluginError, match="already initialized"):
        plugin.init(0, 1, plugin.unique_id(), 0)


def test_abort_stops_collectives_until_init_again(plugin: Plugin, cuda: CudaDriver) -> None:
    ptr = cuda.upload(np.ones(8, np.float32))
    try:
        plugin.abort()
        with pytest.raises(PluginError, match="aborted after an earlier failure") as stopped:
            plugin.allreduce(ptr, 8, "float32")
        assert stopped.value.status == "peer"
        plugin.finalize()
        plugin.init(0, 1, plugin.unique_id(), 0)
        plugin.allreduce(ptr, 8, "float32")
        plugin.synchronize()
    finally:
        cuda.free(ptr)


def test_a_rank_that_never_joins_init_times_out(plugin: Plugin) -> None:
    """Rank 0 of 2 on this GPU; rank 1 never comes: init returns TIMEOUT in time, not a hang."""
    plugin.finalize()
    start = time.monotonic()
    with pytest.raises(PluginError, match=r"^init: not every rank joined the NCCL communicator within 3 s") as late:
        plugin.init(0, 2, plugin.unique_id(), 0, timeout=3.0)
    assert late.value.status == "timeout"
    assert time.monotonic() - start < 20
    plugin.init(0, 1, plugin.unique_id(), 0)  # and the plugin is usable again


@pytest.mark.parametrize("mode", ["collectives", "peer_death"])
def test_two_ranks_on_two_gpus(built_plugin: hvd_nccl_build.Built, plugin: Plugin, cuda: CudaDriver, mode: str) -> None:
    if cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    uid = plugin.unique_id().hex()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONFAULTHANDLER="1")  # the worker imports tests.nccl.*
    worker = HERE / "nccl_gpu_worker.py"
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(built_plugin.library), str(r), "2", uid, mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    codes = [0, 0] if mode == "collectives" else [0, 3]  # peer_death: rank 1 exits with 3 on purpose
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == codes[rank], f"rank {rank}: {out}"
    if mode == "peer_death":
        assert "survivor: " in outputs[0], outputs[0]
