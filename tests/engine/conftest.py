"""Fixtures for the selector-engine tests: the real CLI in a clean subprocess,
the project catalog, and the recorded NVML answers in tests/data/nvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import ROOT, clean_env


class CliResult:
    """A finished ``python -m selector_backend`` run."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        return json.loads(self.out)

    def one_line_error(self) -> str:
        """The single error line a user sees; fails on tracebacks or chatter."""
        assert "Traceback" not in self.err, self.err
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one error line, got:\n{self.err}"
        assert lines[0].startswith("hvd-selector: error: "), lines[0]
        return lines[0]

    def __repr__(self) -> str:
        return f"CliResult(rc={self.rc}, err={self.err[-2000:]!r})"


Cli = Callable[..., CliResult]


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
