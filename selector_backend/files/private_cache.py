"""The user's cache directory, and when a file found there may be trusted.

The backend keeps decisions there (the install plan, the catalog's parsed
TOML) that steer what gets installed, so a cached file is used only when this
user wrote it and nobody else can rewrite it. Imports nothing heavy: the
catalog memo is read on every cold start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/hvd-selector`` (default ``~/.cache/hvd-selector``); the settings' cache-dir default."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hvd-selector"


def trusted(info: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def read_trusted(path: Path, max_age_s: float | None = None) -> bytes | None:
    """The bytes of a cached file, or None where it is absent, unreadable, not ``trusted`` or
    older than ``max_age_s``; the checks look at the file that was opened, not at the path again."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not trusted(info):
                return None
            if max_age_s is not None and time.time() - info.st_mtime > max_age_s:
                return None
            return handle.read()
    except OSError:
        return None
