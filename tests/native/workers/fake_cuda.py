"""A DLPack capsule that claims to live on a CUDA device (no GPU needed).

The core must route such a tensor to the NCCL plugin and, without a usable
plugin or device, raise UnavailableError("GPU operations unavailable: ...")
without touching the (fake) device pointer.
"""

import ctypes


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


_keep = []


def cuda_capsule(n: int = 4, address: int = 0x1000):
    """A capsule for a float32[n] tensor at `address` on CUDA device 0."""
    shape = (ctypes.c_int64 * 1)(n)
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(address, DLDevice(2, 0), 1, DLDataType(2, 32, 1), shape, None, 0)
    _keep.append((shape, managed))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor", None)
