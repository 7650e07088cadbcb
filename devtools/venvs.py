"""Fresh virtual environments and the local wheels they install from: what the
pip end-to-end tests and the pip-install benchmark both set up."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Iterable
from pathlib import Path


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user with no hvd-selector or pip settings and no active venv sees it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "PIP_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def make_venv(path: Path) -> Path:
    """A fresh venv with pip at ``path`` (an old one there is removed); returns its bin/."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin"


def download_wheels(dest: Path, packages: Iterable[str], timeout: float = 600) -> Path:
    """Binary wheels of ``packages`` and their dependencies into ``dest``, so later
    installs need no network (``pip install --find-links dest``). This one runs
    with the caller's pip settings: they say how to reach the index."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest), *packages]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stderr[-4000:]}")
    return dest
