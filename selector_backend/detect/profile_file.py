"""A HostProfile from a JSON file, completed with the facts that describe this installer.

A profile describes another machine (a GPU node seen from a login node, a CI
runner's target); pip on *this* interpreter still decides platform, Python
tag and libc, so those are filled from ``detect.system`` when the file lacks
them. Hardware facts are never filled: a missing field means absent.
"""

from __future__ import annotations

from pathlib import Path

from selector_backend.detect import system
from selector_backend.engine.host import HostProfile
from selector_backend.files import safeparse


def load_host_profile(path: Path) -> HostProfile:
    """Read a HostProfile JSON file (a regular file, bounded: ``safeparse.read_json``); any problem is a
    one-line InputError."""
    data = safeparse.read_json(path, "host profile")
    return with_interpreter_defaults(HostProfile.from_json(data, source=str(path)))


def with_interpreter_defaults(profile: HostProfile) -> HostProfile:
    """Fill ``platform``, ``python`` and ``libc`` the way pip here would see them.

    These describe the installer, not the hardware: a hand-written profile of
    a GPU node without them could match no wheel at all. ``libc`` is taken
    only when the profile's platform is this one; ``machine`` follows the
    profile's own cpu. GPUs, driver, libraries and os keep DESIGN's rule: a
    missing field is absent, never detected here. A note lists what was filled.
    """
    filled: dict[str, str] = {}
    here = system.platform_name()
    if profile.platform is None:
        filled["platform"] = here
    if profile.python is None:
        filled["python"] = system.python_tag()
    if profile.libc is None and filled.get("platform", profile.platform) == here:
        libc = system.libc()
        if libc is not None:
            filled["libc"] = libc
    if profile.machine is None and profile.cpu is not None:
        filled["machine"] = profile.cpu.family
    if not filled:
        return profile
    note = "not in the profile, taken from this interpreter: " + ", ".join(f"{k}={v}" for k, v in filled.items())
    return profile._replace(**filled).with_note(note)  # type: ignore[arg-type]
