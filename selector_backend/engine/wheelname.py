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
        return expand_tag(self.python, self.abi, self.platform)


def expand_tag(python: str, abi: str, platform: str) -> list[str]:
    """Every python-abi-platform tag of a compressed tag set (``py2.py3-none-any``: two)."""
    return [f"{p}-{a}-{pl}" for p in python.split(".") for a in abi.split(".") for pl in platform.split(".")]


def split_wheel_name(filename: str) -> tuple[str, str, str | None, str, str, str, str | None] | None:
    """WheelName's fields as a plain tuple, None for anything else: the cheap form for an index's every file."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    label = None
    labelled_six = len(parts) == 6 and not parts[2][:1].isdigit()  # else the sixth part is a build tag
    if (labelled_six or len(parts) == 7) and _LABEL.fullmatch(parts[-1]):
        label = parts.pop()
    if len(parts) == 5:
        return parts[0], parts[1], None, parts[2], parts[3], parts[4], label
    if len(parts) == 6:
        return parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], label
    return None


def parse_wheel_name(filename: str) -> WheelName:
    """Parse a standard or labelled wheel name; anything else is an InputError."""
    fields = split_wheel_name(filename)
    if fields is None:
        raise InputError(f"{filename!r} is not a wheel file name")
    return WheelName(*fields)


def standard_filename(filename: str) -> str:
    w = parse_wheel_name(filename)
    build = f"-{w.build}" if w.build else ""
    return f"{w.name}-{w.version}{build}-{w.python}-{w.abi}-{w.platform}.whl"


def labelled_filename(filename: str, label: str) -> str:
    if not _LABEL.fullmatch(label):
        raise InputError(f"variant label {label!r} is not 1-16 characters of [0-9a-z_.]")
    return standard_filename(filename)[:-4] + f"-{label}.whl"
