"""The docs site as the tests read it: built once per state of the checkout, shared by every test
module and pytest-xdist worker (a Sphinx build of the site costs about 5 CPU-s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devtools.build_cache import BUILD_DIR, REPO, build_once, files_hash, source_files


def built_docs() -> tuple[Path, list[str]]:
    """The HTML folder of ``docs/`` (never to be written to: copy it) and the build's warnings and
    errors. Keyed by every file of the checkout, since the pages read the code's settings and catalog."""
    folder = build_once(BUILD_DIR / "test-docs" / f"site-{files_hash(source_files('.'))}", _build)
    lines = (folder / "warnings.txt").read_text(encoding="utf-8").splitlines()
    return folder / "html", [line for line in lines if "WARNING" in line or "ERROR" in line]


def _build(folder: Path) -> None:
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-w", str(folder / "warnings.txt")]
    proc = subprocess.run(
        [*cmd, str(REPO / "docs"), str(folder / "html")], capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx failed ({proc.returncode}): {proc.stderr[-3000:]}")
