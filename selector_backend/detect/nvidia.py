"""NVIDIA GPUs and the driver's CUDA version: NVML first, then what users' machines really have.

Order: NVML (the ``pynvml`` module from nvidia-ml-py); if NVML is missing or
fails, ``nvidia-smi`` (GPUs and "CUDA Version"), then
``/proc/driver/nvidia/version`` (driver only). ``load_nvml`` is the NVML
boundary: with HVD_SELECTOR_NVML_REPLAY=FILE it returns recorded NVML answers
(see ``nvml_replay``) so a GPU machine's behaviour can be replayed anywhere.
"""

import contextlib
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from selector_backend.detect.bounded import call_with_timeout, find_program, run_text
from selector_backend.engine.host import GpuInfo

PROC_VERSION = Path("/proc/driver/nvidia/version")
DEVICE_NODE = Path("/dev/nvidiactl")


class NvidiaFacts(NamedTuple):
    gpus: tuple[GpuInfo, ...] = ()
    cuda_driver: str | None = None


def load_nvml() -> Any | None:
    """The NVML module, a replay of a recording, or None when no driver is there."""
    replay = os.environ.get("HVD_SELECTOR_NVML_REPLAY")
    if replay:
        from selector_backend.detect.nvml_replay import ReplayNvml

        return ReplayNvml.from_file(Path(replay))
    if not (PROC_VERSION.exists() or DEVICE_NODE.exists()):
        return None  # no kernel driver: skip the NVML import, the costliest step of detection
    import pynvml

    return pynvml


def cuda_version_text(encoded: int) -> str:
    """NVML's 12040 -> '12.4'."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def query_nvml(nvml: Any) -> NvidiaFacts:
    nvml.nvmlInit()
    try:
        driver = cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(
                    "nvidia",
                    _decode(nvml.nvmlDeviceGetName(handle)),
                    f"{int(major)}.{int(minor)}",
                    int(memory.total) // (1024 * 1024),
                )
            )
        return NvidiaFacts(tuple(gpus), driver)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def parse_nvidia_smi(summary: str, query_csv: str | None) -> NvidiaFacts:
    """GPUs from ``--query-gpu=name,compute_cap,memory.total`` CSV, CUDA from the banner."""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", summary)
    gpus = []
    for line in (query_csv or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and re.fullmatch(r"\d+\.\d+", parts[1]):
            mem = re.match(r"(\d+)", parts[2])
            gpus.append(GpuInfo("nvidia", parts[0], parts[1], int(mem.group(1)) if mem else None))
    return NvidiaFacts(tuple(gpus), match.group(1) if match else None)


def detect(notes: list[str], timeout: float | None = None) -> NvidiaFacts:
    nvml = None
    try:
        nvml = load_nvml()
    except ImportError as exc:
        notes.append(f"nvml: pynvml not importable ({exc}); pip install nvidia-ml-py")
    if nvml is not None:
        try:
            facts = call_with_timeout(lambda: query_nvml(nvml), "NVML", timeout)
            if facts.gpus:
                notes.append(f"nvml: {len(facts.gpus)} GPU(s), driver supports CUDA {facts.cuda_driver}")
            return facts
        except Exception as exc:
            notes.append(f"nvml: {type(exc).__name__}: {exc}".rstrip(": "))
    elif not os.environ.get("HVD_SELECTOR_NVML_REPLAY"):
        notes.append("nvml: no NVIDIA kernel driver (no /proc/driver/nvidia/version or /dev/nvidiactl)")
    smi = find_program("nvidia-smi")
    summary = run_text([smi], notes, timeout) if smi else None
    if smi and summary is not None:  # None: timed out or failed (noted); do not wait a second time
        query = [smi, "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"]
        csv = run_text(query, notes, timeout)
        facts = parse_nvidia_smi(summary, csv)
        if facts.gpus or facts.cuda_driver:
            notes.append(f"nvidia-smi: {len(facts.gpus)} GPU(s), CUDA {facts.cuda_driver}")
            return facts
    if PROC_VERSION.exists():
        text = PROC_VERSION.read_text(errors="replace")
        match = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", text)
        if match:
            # suggest installing only what is missing: a present NVML or nvidia-smi that failed is noted above
            missing = [name for name, absent in (("nvidia-ml-py", nvml is None), ("nvidia-smi", not smi)) if absent]
            why = f"install {' or '.join(missing)}" if missing else "see the notes above"
            notes.append(f"/proc/driver/nvidia/version: driver {match.group(1)} present, but no GPU details ({why})")
    return NvidiaFacts()
