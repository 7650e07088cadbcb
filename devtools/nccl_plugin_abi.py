"""ctypes mirror of native/include/hvd/nccl_plugin.h (ABI 2), so tests drive the
plugin exactly as the core does: dlopen, hvd_nccl_plugin_get, then the table."""

from __future__ import annotations

import ctypes
from pathlib import Path

ABI = 2
UNIQUE_ID_BYTES = 128
DTYPES = {
    "float16": 0,
    "bfloat16": 1,
    "float32": 2,
    "float64": 3,
    "int32": 4,
    "int64": 5,
    "uint8": 6,
    "int8": 7,
    "int16": 8,
    "bool": 9,
}
OPS = {"sum": 0, "average": 1, "min": 2, "max": 3, "product": 4}
STATUS = {1: "invalid", 3: "timeout", 4: "peer", 7: "internal"}  # hvd_plugin_status

_c = ctypes
_size_p = _c.POINTER(_c.c_size_t)
_REDUCE = (_c.c_int, _c.c_int, _c.c_double, _c.c_double, _c.c_void_p)  # dtype, op, prescale, postscale, stream


class PluginTable(_c.Structure):
    _fields_ = [  # noqa: RUF012 (ctypes wants a class attribute)
        ("abi_version", _c.c_int),
        ("last_error", _c.CFUNCTYPE(_c.c_char_p)),
        ("versions", _c.CFUNCTYPE(_c.c_char_p)),
        ("device_count", _c.CFUNCTYPE(_c.c_int)),
        ("compute_capability", _c.CFUNCTYPE(_c.c_int, _c.c_int, _c.POINTER(_c.c_int))),
        ("get_unique_id", _c.CFUNCTYPE(_c.c_int, _c.c_void_p)),
        ("init", _c.CFUNCTYPE(_c.c_int, _c.c_int, _c.c_int, _c.c_void_p, _c.c_int, _c.c_double)),
        ("finalize", _c.CFUNCTYPE(_c.c_int)),
        ("abort", _c.CFUNCTYPE(_c.c_int)),
        ("allreduce", _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_void_p, _c.c_size_t, *_REDUCE)),
        (
            "grouped_allreduce",
            _c.CFUNCTYPE(_c.c_int, _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_void_p), _size_p, _c.c_size_t, *_REDUCE),
        ),
        ("allgatherv", _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_void_p, _size_p, _c.c_int, _c.c_void_p)),
        ("broadcast", _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_int, _c.c_void_p)),
        ("alltoallv", _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _size_p, _c.c_void_p, _size_p, _c.c_int, _c.c_void_p)),
        ("synchronize", _c.CFUNCTYPE(_c.c_int, _c.c_void_p)),
    ]


class PluginError(RuntimeError):
    """A failed call: last_error()'s text, and the status code's name in `status`."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class Plugin:
    """The loaded plugin; methods raise PluginError with last_error()."""

    def __init__(self, path: Path) -> None:
        self.lib = _c.CDLL(str(path), mode=_c.RTLD_LOCAL)
        get = self.lib.hvd_nccl_plugin_get
        get.restype = _c.POINTER(PluginTable)
        self.table = get().contents

    def error(self) -> str:
        return (self.table.last_error() or b"").decode()

    def check(self, rc: int) -> None:
        if rc != 0:
            raise PluginError(self.error(), STATUS.get(rc, f"unknown status {rc}"))

    def versions(self) -> str:
        return bytes(self.table.versions()).decode()

    def device_count(self) -> int:
        return int(self.table.device_count())

    def compute_capability(self, device: int) -> int:
        cc = _c.c_int()
        self.check(self.table.compute_capability(device, _c.byref(cc)))
        return cc.value

    def unique_id(self) -> bytes:
        buf = _c.create_string_buffer(UNIQUE_ID_BYTES)
        self.check(self.table.get_unique_id(buf))
        return buf.raw

    def init(self, rank: int, size: int, unique_id: bytes, device: int, timeout: float = 60.0) -> None:
        self.check(self.table.init(rank, size, _c.c_char_p(unique_id), device, timeout))

    def finalize(self) -> None:
        self.check(self.table.finalize())

    def abort(self) -> None:
        self.check(self.table.abort())

    def allreduce(
        self,
        ptr: int,
        count: int,
        dtype: str,
        op: str = "sum",
        prescale: float = 1.0,
        postscale: float = 1.0,
        out: int | None = None,
    ) -> None:
        """Reduce `count` elements at `ptr` into `out` (None: in place)."""
        recv = ptr if out is None else out
        self.check(self.table.allreduce(ptr, recv, count, DTYPES[dtype], OPS[op], prescale, postscale, None))

    def grouped_allreduce(
        self,
        ptrs: list[int],
        counts: list[int],
        dtype: str,
        op: str = "sum",
        prescale: float = 1.0,
        postscale: float = 1.0,
        outs: list[int] | None = None,
    ) -> None:
        """Fused allreduce of the buffers at `ptrs` into `outs` (None: in place)."""
        sends = (_c.c_void_p * len(ptrs))(*ptrs)
        recvs = (_c.c_void_p * len(ptrs))(*(ptrs if outs is None else outs))
        sizes = (_c.c_size_t * len(counts))(*counts)
        self.check(
            self.table.grouped_allreduce(
                sends, recvs, sizes, len(ptrs), DTYPES[dtype], OPS[op], prescale, postscale, None
            )
        )

    def allgatherv(self, send: int, recv: int, recv_counts: list[int], dtype: str) -> None:
        counts = (_c.c_size_t * len(recv_counts))(*recv_counts)
        self.check(self.table.allgatherv(send, recv, counts, DTYPES[dtype], None))

    def broadcast(self, ptr: int, count: int, dtype: str, root: int) -> None:
        self.check(self.table.broadcast(ptr, count, DTYPES[dtype], root, None))

    def alltoallv(self, send: int, send_counts: list[int], recv: int, recv_counts: list[int], dtype: str) -> None:
        s = (_c.c_size_t * len(send_counts))(*send_counts)
        r = (_c.c_size_t * len(recv_counts))(*recv_counts)
        self.check(self.table.alltoallv(send, s, recv, r, DTYPES[dtype], None))

    def synchronize(self) -> None:
        self.check(self.table.synchronize(None))
