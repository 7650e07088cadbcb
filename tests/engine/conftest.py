"""Fixtures for the selector-engine tests: the real CLI in a clean subprocess,
the project catalog, and JSON files in a temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from .engine_helpers import ROOT, Cli, CliResult, clean_env


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """Run the real CLI: ``cli("resolve", "--json", env={...}, path_prepend=dir)``."""

    def run(
        *args: str,
        env: Mapping[str, str] | None = None,
        path_prepend: Path | None = None,
        timeout: float = 60,
    ) -> CliResult:
        full = clean_env(tmp_path, env)
        if path_prepend is not None:
            full["PATH"] = f"{path_prepend}{os.pathsep}{full.get('PATH', '')}"
        proc = subprocess.run(
            [sys.executable, "-m", "selector_backend", *args],
            cwd=ROOT,
            env=full,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return CliResult(proc)

    return run


@pytest.fixture(scope="session")
def catalog() -> Any:
    from selector_backend.engine.catalog import load_catalog

    return load_catalog()


@pytest.fixture
def write_json(tmp_path: Path) -> Callable[[str, Any], Path]:
    def write(name: str, data: Any) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(data), encoding="utf-8")
        return path

    return write
