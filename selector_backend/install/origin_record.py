"""The install record the backend adds to the wheel it hands pip (``engine.reinstall``).

A prebuilt wheel is verified (sha256, variant.json) before this runs, and the
record is the only member added: the installed build then knows the variant
index it came from, so its repair commands work as printed. The record gets
its RECORD row like every other member, so pip and uv install and uninstall
it with the rest (uv refuses a member RECORD does not list).
"""

from __future__ import annotations

from pathlib import Path

from selector_backend.engine.reinstall import ORIGIN_FILE, InstallOrigin
from selector_backend.install.wheel_members import DIST_INFO, add_members, record_row

__all__ = ["add_origin", "record_row"]


def add_origin(wheel: Path, origin: InstallOrigin) -> None:
    """Rewrite ``wheel`` in place (atomically) with ``{dist-info}/hvd_selector_origin.json``."""
    add_members(wheel, {f"{DIST_INFO}/{ORIGIN_FILE}": origin.to_text().encode("utf-8")})
