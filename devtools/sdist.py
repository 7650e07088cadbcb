"""The project's sdist with a variant index URL embedded as its default, built
as a release builds it: what the pip end-to-end tests and the pip-install
benchmark publish next to their variant wheels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_sdist(out: Path, index_url: str, env: dict[str, str] | None = None, timeout: float = 900) -> Path:
    """``python -m build --sdist -C index-url=...`` into ``out`` (no isolation: the
    build requirements are installed here); returns the sdist."""
    cmd = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out)]
    cmd += ["-C", f"index-url={index_url}", str(REPO)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    (sdist,) = out.glob("*.tar.gz")
    return sdist
