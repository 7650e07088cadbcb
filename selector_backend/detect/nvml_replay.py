"""Recorded NVML answers, replayed through the same calls ``nvidia.query_nvml`` makes.

A recording is JSON: ``{"cuda_driver_version": 12040, "devices": [{"name":
"NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0], "memory_total":
85899345920}]}`` or ``{"error": "NVML_ERROR_DRIVER_NOT_LOADED"}`` to replay
a failing NVML. It is the NVML boundary for machines with no GPU (tests, CI,
reproducing a user's report).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from selector_backend.errors import InputError
from selector_backend.files import safeparse

MAX_BYTES = 16 << 20  # a recording of a few GPUs is a few hundred bytes


class ReplayNvmlError(Exception):
    """Stands for pynvml.NVMLError; the message is NVML's error name."""


class ReplayNvml:
    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.devices = recording.get("devices", [])

    @classmethod
    def from_file(cls, path: Path) -> ReplayNvml:
        """The recording in ``path``: a regular file of at most ``MAX_BYTES`` (``safeparse.read_json``);
        anything else is an InputError, which detection passes on (never a note)."""
        data = safeparse.read_json(path, "NVML recording (HVD_SELECTOR_NVML_REPLAY)", MAX_BYTES)
        if not isinstance(data, dict):
            raise InputError(f"HVD_SELECTOR_NVML_REPLAY={path}: a recording is a JSON object")
        return cls(data)

    def _maybe_fail(self) -> None:
        if "error" in self.recording:
            raise ReplayNvmlError(str(self.recording["error"]))

    def nvmlInit(self) -> None:
        self._maybe_fail()

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self.recording["cuda_driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return dict(self.devices[index])

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> str:
        return str(handle["name"])

    def nvmlDeviceGetCudaComputeCapability(self, handle: dict[str, Any]) -> tuple[int, int]:
        major, minor = handle["compute_capability"]
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=int(handle.get("memory_total", 0)))
