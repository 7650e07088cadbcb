"""Detect this machine: one module per fact, each failing soft into ``notes``.

``detect_host`` never raises for a broken detector and never hangs: every
subprocess and the NVML query are time-bounded (the detect-timeout setting,
HVD_SELECTOR_DETECT_TIMEOUT, default 5 s). ``host_profile_for`` is the host
a command resolves against: the host-profile file or detection, then the
user's host facts (``settings.apply_host_overrides``). Detection sits above
settings: it reads them, settings never import detection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from selector_backend.detect import cpu, libraries, nvidia, system
from selector_backend.engine.host import HostProfile, LibraryInfo
from selector_backend.errors import SelectorError
from selector_backend.settings import Settings, apply_host_overrides

__all__ = ["detect_host", "host_profile_for"]

T = TypeVar("T")


def _soft(what: str, probe: Callable[[], T], fallback: T, notes: list[str]) -> T:
    try:
        return probe()
    except SelectorError:
        raise  # bad user input (e.g. an unreadable HVD_SELECTOR_NVML_REPLAY) is an error, not a note
    except Exception as exc:  # a detector bug or an odd machine must not stop detection
        notes.append(f"{what}: detection failed ({type(exc).__name__}: {exc})")
        return fallback


def detect_host(timeout: float | None = None) -> HostProfile:
    """Everything detectable about this machine, without overrides.

    ``timeout`` bounds each tool and the NVML query (Settings.detect_timeout;
    None reads it from the environment).
    """
    notes: list[str] = []
    gpu = _soft("nvidia", lambda: nvidia.detect(notes, timeout), nvidia.NvidiaFacts(), notes)
    libs: dict[str, LibraryInfo | None] = {
        "mpi": _soft("mpi", lambda: libraries.detect_mpi(notes, timeout), None, notes),
        "nccl": _soft("nccl", lambda: libraries.detect_nccl(notes), None, notes),
        "gloo": _soft("gloo", lambda: libraries.detect_gloo(notes), None, notes),
    }
    return HostProfile(
        platform=system.platform_name(),
        os=_soft("os", system.os_name, None, notes),
        machine=system.machine(),
        libc=_soft("libc", system.libc, None, notes),
        python=system.python_tag(),
        cpu=_soft("cpu", lambda: cpu.detect(notes), None, notes),
        gpus=gpu.gpus,
        cuda_driver=gpu.cuda_driver,
        libraries=libs,
        notes=tuple(notes),
    )


def host_profile_for(settings: Settings) -> HostProfile:
    """The host-profile file if one is set, else detection (bounded by detect-timeout); then overrides."""
    if settings.host_profile is not None:
        from selector_backend.detect.profile_file import load_host_profile

        profile = load_host_profile(settings.host_profile)
    else:
        profile = detect_host(timeout=settings.detect_timeout)
    return apply_host_overrides(profile, settings)
