"""The effective settings, each with the source that gave it (``hvd-selector config``).

The values and their sources come from the one source chain (``load_settings``
records where each knob came from in ``Settings.origins``); this module only
puts them into words, as pip's ``config list`` or Spack's ``config blame``
do.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from selector_backend.settings.host_facts import fact_text
from selector_backend.settings.model import OPTIONS, Option, Settings


class Effective(NamedTuple):
    """One knob as ``config`` shows it."""

    option: Option
    value: str  # as a user would write it (a host fact left to detection: "detected")
    source: str  # "-C cache-dir", "HVD_SELECTOR_INDEX_URL", "/etc/hvd-selector/config.toml:3", "default"


def value_text(option: Option, value: Any) -> str:
    """A knob's value as a user would write it."""
    if option.host_fact:
        return fact_text(option.attr, value)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(value) or "none"
    return str(value)


def effective(settings: Settings) -> list[Effective]:
    """Every knob of ``settings`` (settings first, then host facts) with its value and source."""
    out = []
    for option in OPTIONS:
        source = settings.origins.get(option.name)
        if option.host_fact and source is None:
            out.append(Effective(option, "detected", "default"))
            continue
        owner: Any = settings.host if option.host_fact else settings
        out.append(Effective(option, value_text(option, getattr(owner, option.attr)), source or "default"))
    return out
