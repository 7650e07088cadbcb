"""Fixtures for the Spack bridge tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selector_backend.engine.catalog import load_catalog

from .spack_hosts import host_json


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture
def write_host(tmp_path):
    """Write a host profile file for CLI tests and return its path."""

    def write(*args: Any, **kwargs: Any) -> Path:
        path = tmp_path / "host.json"
        path.write_text(json.dumps(host_json(*args, **kwargs)))
        return path

    return write
