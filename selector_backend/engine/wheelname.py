"""Wheel file names: the labelled variant form and the standard form pip expects.

Index: ``{name}-{ver}-{py}-{abi}-{plat}-{label}.whl``; pip:
``{name}-{ver}-{py}-{abi}-{plat}.whl``. Same bytes, two names.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from selector_backend.errors import InputError

_LABEL = re.compile(r"[0-9a-z_.]{1,16}")


class WheelName(NamedTuple):
    name: str
    version: str
    build: str | None
    python: str
    abi: str
    platform: str
    label: str | None

    def tags(self) -> list[str]:
        """Every python-abi-platform tag the name expands to (compressed tag sets)."""
        return [
            f"{p}-{a}-{pl}"
            for p in self.python.split(".")
            for a in self.abi.split(".")
            for pl in self.platform.split(".")
        ]


def parse_wheel_name(filename: str) -> WheelName:
    """Parse a standard or labelled wheel name; anything else is an InputError."""
    if not filename.endswith(".whl"):
        raise InputError(f"{filename!r} is not a wheel file name")
    parts = filename[:-4].split("-")
    label = None
    labelled_six = len(parts) == 6 and not parts[2][:1].isdigit()  # else the sixth part is a build tag
    if (labelled_six or len(parts) == 7) and _LABEL.fullmatch(parts[-1]):
        label = parts.pop()
    if len(parts) == 5:
        name, version, python, abi, platform = parts
        build = None
    elif len(parts) == 6:
        name, version, build, python, abi, platform = parts
    else:
        raise InputError(f"{filename!r} is not a wheel file name")
    return WheelName(name, version, build, python, abi, platform, label)


def standard_filename(filename: str) -> str:
    w = parse_wheel_name(filename)
    build = f"-{w.build}" if w.build else ""
    return f"{w.name}-{w.version}{build}-{w.python}-{w.abi}-{w.platform}.whl"


def labelled_filename(filename: str, label: str) -> str:
    if not _LABEL.fullmatch(label):
        raise InputError(f"variant label {label!r} is not 1-16 characters of [0-9a-z_.]")
    return standard_filename(filename)[:-4] + f"-{label}.whl"
