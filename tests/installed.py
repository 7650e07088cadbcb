"""Skip a test module when a package it drives is not installed, without importing the package.

``pytest.importorskip`` imports it: torch costs 2.4 s and ray 0.5 s in every pytest-xdist worker
that only collects a module whose tests run torch or ray in subprocesses. A package that is
installed but fails to import then fails the test that uses it instead of skipping it.
"""

from __future__ import annotations

import importlib.util

import pytest


def require(name: str, reason: str | None = None) -> None:
    """Skip the calling test module unless ``name`` can be imported (it is looked up, not imported)."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(reason or f"could not import {name!r}: it is not installed", allow_module_level=True)
