"""Test hosts as HostProfile JSON and the fixture paths, shared by the Spack and Horovod tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector_backend.engine.host import HostProfile

DATA = Path(__file__).parent / "data"
#: The two real build-cache listings (copied unchanged from the project's shared fixtures).
DEVELOP = DATA / "listings" / "py-horovod-develop.listing"
DATED = DATA / "listings" / "py-horovod-develop-2025-07-13.listing"

GPUS = {
    "none": [],
    "a100": [{"vendor": "nvidia", "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_mib": 81920}],
    "h100": [{"vendor": "nvidia", "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_mib": 81559}],
    "gtx1080": [{"vendor": "nvidia", "name": "NVIDIA GeForce GTX 1080", "compute_capability": "6.1"}],
}


def host_json(
    os: str,
    cpu: str,
    gpu: str = "none",
    driver: str | None = "12.4",
    mpi: str | None = None,
    platform: str | None = None,
) -> dict[str, Any]:
    """A HostProfile JSON document (DESIGN.md shape): hardware comes from here, never this machine."""
    gpus = GPUS[gpu]
    return {
        "platform": platform or ("darwin" if os in ("sequoia", "sonoma", "ventura") else "linux"),
        "os": os,
        "cpu": {"microarch": cpu},
        "gpus": gpus,
        "cuda_driver": driver if gpus else None,
        "libraries": {"mpi": {"implementation": mpi} if mpi else None, "nccl": None, "gloo": None},
    }


def host(*args: Any, **kwargs: Any) -> HostProfile:
    return HostProfile.from_json(host_json(*args, **kwargs), source="test host")
