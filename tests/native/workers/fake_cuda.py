"""Arrays that claim to live on a CUDA device (DLPack device type 2), no GPU needed.

``cuda_capsule()`` points at an address nobody may touch: the core must route
it to the NCCL plugin and, without a usable plugin or device, raise
UnavailableError("GPU operations unavailable: ...") without reading it.

``DeviceArray`` wraps a numpy array whose host memory the tests' stand-in
plugin (tests/nccl/standin/) reads and writes as "device" memory: to the core
and the Python API it is a CUDA tensor (``is_cuda``, ``__dlpack__``,
``new_empty``, ``clone`` as torch has them), so their whole GPU path runs.
With ``device="cpu"`` it is the same array on the CPU: the reference run, in
every dtype (numpy has no bfloat16).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

DEVICES = {"cpu": 1, "cuda": 2}  # kDLCPU, kDLCUDA
# DLPack (code, bits) per dtype name; bfloat16 is stored as uint16 bits in numpy.
DLPACK_TYPES = {
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "bool": (6, 8),
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_keep: list[Any] = []


def _capsule(address: int, shape: tuple[int, ...], dtype: str, device: int, device_id: int, keep: list[Any]) -> Any:
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = DLPACK_TYPES[dtype]
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(
        address, DLDevice(device, device_id), len(shape), DLDataType(code, bits, 1), dims, None, 0
    )
    keep.append((dims, managed))  # the consumer reads them after this returns
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor", None)


def cuda_capsule(n: int = 4, address: int = 0x1000) -> Any:
    """A capsule for a float32[n] tensor at `address` on CUDA device 0."""
    return _capsule(address, (n,), "float32", DEVICES["cuda"], 0, _keep)


class DeviceArray:
    """A numpy array presented as a tensor on CUDA device `device_id` (host memory underneath).

    `dtype` names the element type when numpy has none for it (``"bfloat16"``
    over uint16 bits); otherwise the array's own.
    """

    def __init__(self, host: np.ndarray, dtype: str | None = None, device_id: int = 0, device: str = "cuda") -> None:
        self.host = np.ascontiguousarray(host)
        self.dtype_name = dtype or str(self.host.dtype)
        self.device_id = device_id
        self.device = device
        self._capsules: list[Any] = []

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host.shape)

    def __dlpack__(self, **kwargs: Any) -> Any:
        address = self.host.ctypes.data
        return _capsule(address, self.shape, self.dtype_name, DEVICES[self.device], self.device_id, self._capsules)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DEVICES[self.device], self.device_id)

    def new_empty(self, shape: tuple[int, ...]) -> DeviceArray:
        return DeviceArray(np.empty(shape, dtype=self.host.dtype), self.dtype_name, self.device_id, self.device)

    def clone(self) -> DeviceArray:
        return DeviceArray(self.host.copy(), self.dtype_name, self.device_id, self.device)
