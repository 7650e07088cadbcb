"""Device memory for GPU tests and benchmarks through the CUDA driver API (libcuda.so.1 via
ctypes): every GPU machine has the driver, so the tests need no torch or
cupy. Uses the primary context, the same one the plugin's CUDA runtime uses."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

_NUMPY = {
    "float16": np.float16,
    "bfloat16": np.uint16,  # raw bfloat16 bits; see to_bfloat16 / from_bfloat16
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "int8": np.int8,
    "int16": np.int16,
    "bool": np.bool_,
}


def numpy_dtype(name: str) -> Any:
    return _NUMPY[name]


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (what __float2bfloat16 does)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


class CudaDriver:
    def __init__(self, device: int = 0) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        u64, size, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size]
        self.lib.cuMemFree_v2.argtypes = [u64]
        self.lib.cuMemcpyHtoD_v2.argtypes = [u64, vp, size]
        self.lib.cuMemcpyDtoH_v2.argtypes = [vp, u64, size]
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.device = dev.value
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.device), "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.ctx = ctx

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {rc} {name.value!r}")

    def device_count(self) -> int:
        n = ctypes.c_int()
        self._check(self.lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        return n.value

    def compute_capability(self) -> int:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, self.device), "cc major")
        self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, self.device), "cc minor")
        return major.value * 10 + minor.value

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), "cuMemAlloc")
        return ptr.value

    def free(self, ptr: int) -> None:
        self._check(self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")

    def upload(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        ptr = self.alloc(array.nbytes)
        self._check(
            self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), array.ctypes.data_as(ctypes.c_void_p), array.nbytes),
            "cuMemcpyHtoD",
        )
        return ptr

    def download(self, ptr: int, count: int, dtype: Any) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
        self._check(
            self.lib.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(ptr), out.nbytes),
            "cuMemcpyDtoH",
        )
        return out
