"""The selector engine and PEP 517 backend.

A published sdist carries pure-Python copies of its two build-time imports
(archspec, packaging) in ``_vendor/`` and declares no build requirements, so
stock pip's isolated build environment installs nothing on the prebuilt path
(``sdist.vendor_into``). Installed copies win: the directory is appended to
``sys.path``, not prepended. A source checkout has no ``_vendor/`` and
declares the requirements in pyproject.toml as usual.
"""

import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""This package's directory; its parent is the repository root in a source checkout."""

_VENDOR = PACKAGE_DIR / "_vendor"
if _VENDOR.is_dir() and str(_VENDOR) not in sys.path:
    sys.path.append(str(_VENDOR))
