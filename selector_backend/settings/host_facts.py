"""The user's host facts laid over a HostProfile (``detect.host_profile_for`` applies them)."""

from __future__ import annotations

from typing import Any

from selector_backend.engine.host import CpuInfo, HostProfile, LibraryInfo
from selector_backend.settings.model import OPTIONS, Settings


def fact_text(attr: str, value: Any) -> str:
    """A host fact as a user would write it, normalised (sm_80 shows as 8.0): the override notes' and ``config``'s."""
    if value is None or value == ():
        return "none"
    if attr == "gpus":
        return ",".join(g.compute_capability for g in value)
    if isinstance(value, LibraryInfo):  # the mpi fact names its implementation; nccl and gloo only a version
        parts = (value.implementation if attr == "mpi" else None, value.version)
        return " ".join(p for p in parts if p) or "present"
    return str(value)


def apply_host_overrides(profile: HostProfile, settings: Settings) -> HostProfile:
    """Replace detected facts with the user's (already checked by their types); each leaves a note."""
    changes: dict[str, object] = {}
    libraries = dict(profile.libraries)
    notes = list(profile.notes)
    for option in OPTIONS:
        if not option.host_fact or option.name not in settings.origins:
            continue
        value = getattr(settings.host, option.attr)
        if option.attr == "target":
            changes["cpu"] = cpu = CpuInfo.from_microarch(str(value))
            changes["machine"] = cpu.family
        elif option.attr in ("mpi", "nccl", "gloo"):
            libraries[option.attr] = value
        else:
            changes[option.attr] = value
        notes.append(f"override: {option.name}={fact_text(option.attr, value)} (from {settings.origins[option.name]})")
    if len(notes) == len(profile.notes):
        return profile
    return profile._replace(libraries=libraries, notes=tuple(notes), **changes)  # type: ignore[arg-type]
