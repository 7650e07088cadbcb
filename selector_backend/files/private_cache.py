"""The user's cache directory, and when a file found there may be trusted.

The backend keeps decisions there (the install plan, the catalog's parsed
TOML) that steer what gets installed, so a cached file is used only when this
user wrote it and nobody else can rewrite it. Imports nothing heavy: the
catalog memo is read on every cold start.
"""

from __future__ import annotations

import os
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
