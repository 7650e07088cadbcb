"""The CPU through archspec: microarchitecture, generic level, family, features."""

from __future__ import annotations

from selector_backend.engine.host import CpuInfo
from selector_backend.vendored import import_module


def detect(notes: list[str]) -> CpuInfo:
    host = import_module("archspec.cpu").host()
    if host.vendor == "generic":
        notes.append(f"cpu: archspec knows only the generic {host.name} for this CPU")
    return CpuInfo(host.name, host.generic.name, host.family.name, tuple(sorted(host.features)))
