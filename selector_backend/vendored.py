"""archspec, packaging and tomli, from the sdist's own copies when it carries them.

A published sdist declares no build requirements, so pip's isolated build
environment installs nothing when a prebuilt variant fits; it carries
pure-Python copies of the three under ``selector_backend/_vendor/`` instead,
their own imports rewritten to that package when the sdist is made
(``install.sdist``), as pip vendors its dependencies. ``sys.path`` is never
touched, so a user's ``import packaging`` is never our copy. A checkout or an
installed wheel has no ``_vendor/`` and imports the installed distributions.
The backend's modules import the three through ``import_module``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from selector_backend import PACKAGE_DIR

VENDORED = ("archspec", "packaging", "tomli")
"""The distributions an sdist carries: what the backend imports before anything is installed."""
VENDOR_PACKAGE = "selector_backend._vendor"
_PREFIX = f"{VENDOR_PACKAGE}." if (PACKAGE_DIR / "_vendor").is_dir() else ""


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for a module of archspec, packaging or tomli: the sdist's
    copy where there is one, else the installed one."""
    if name.partition(".")[0] not in VENDORED:
        raise ValueError(f"{name} is not one of the vendored distributions {VENDORED}")
    return importlib.import_module(_PREFIX + name)
