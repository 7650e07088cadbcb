"""The ranks' runtime settings, checked once by the launcher before it starts any rank.

Why here as well as in the core: the core checks these at ``init()`` on every
rank (and that all ranks agree), but a value that is wrong in the launcher's
environment is wrong on every rank, and one line from the launcher is better
than one traceback per rank. The rules and texts are the core's
(``native/src/shm_backend.cpp``); ``tests/native/test_launcher.py`` runs both
on the same values.
"""

from __future__ import annotations

from collections.abc import Mapping

SHM = "HVD_SELECTOR_SHM"
SHM_SLOT = "HVD_SELECTOR_SHM_SLOT"
SHM_DIRECT = "HVD_SELECTOR_SHM_DIRECT"
DIRECT_VALUES = ("", "0", "1", "all", "auto")
SHM_ON = ("", "1", "on", "true", "yes")
SHM_OFF = ("0", "off", "false", "no")
SLOT_MIN, SLOT_MAX = 128 << 10, 1 << 30


def check(env: Mapping[str, str]) -> None:
    """A ValueError naming the first malformed setting, with the text the core gives."""
    shm = env.get(SHM)
    if shm is not None and shm not in SHM_ON + SHM_OFF:
        raise ValueError(f"{SHM}={shm} must be 0 or 1")
    slot = env.get(SHM_SLOT)
    if slot and not (slot.isdecimal() and slot.isascii() and SLOT_MIN <= int(slot) <= SLOT_MAX):
        raise ValueError(f"{SHM_SLOT}={slot} must be a byte count from {SLOT_MIN} to {SLOT_MAX}")
    direct = env.get(SHM_DIRECT)
    if direct is not None and direct not in DIRECT_VALUES:
        raise ValueError(f"{SHM_DIRECT}={direct} must be 0, 1, all or auto")
