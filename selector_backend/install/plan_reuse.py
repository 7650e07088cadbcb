"""One decision per ``pip install``: the backend's plan, shared by its hook processes.

pip runs ``get_requires_for_build_wheel`` and ``build_wheel`` (and more) each in
a fresh process; without this each would detect the machine and read the index
again. The first hook stores its plan in the cache directory under a key of
everything the decision depends on, and later hooks of the same install reuse
it:

- the source tree (its path, ``pyproject.toml`` and catalog bytes): pip unpacks
  each install into a new directory, so one install never sees another's plan;
- the ``-C`` settings, every ``HVD_SELECTOR*`` variable, the config files'
  bytes, a host-profile file's bytes, and the variables detection reads
  (``PATH``, ``LD_LIBRARY_PATH``, ``CUDA_VISIBLE_DEVICES`` …);
- the interpreter.

A plan older than ``MAX_AGE_S`` is never reused (a later install from the same
checkout decides afresh), and a plan that fails to read is recomputed, never
trusted. Only the decision travels: the prebuilt wheel is still verified
against its sha256 when it is fetched and copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from selector_backend.files.private_cache import read_trusted

MAX_AGE_S = 600.0
#: Variables outside HVD_SELECTOR_* that change what detection finds.
DETECTION_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "HOME",
    "CONDA_PREFIX",
    "VIRTUAL_ENV",
)


def _file_digest(path: Path | str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def plan_key(
    config_settings: Mapping[str, Any] | None,
    *,
    editable: bool,
    catalog_path: Path,
    config_files: list[Path],
    host_profile: Path | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """A digest of every input of the backend's decision (see the module docstring)."""
    env = os.environ if environ is None else environ
    parts = {
        "tree": os.getcwd(),
        "pyproject": _file_digest("pyproject.toml"),
        "catalog": _file_digest(catalog_path),
        "config_settings": sorted((str(k), str(v)) for k, v in (config_settings or {}).items()),
        "editable": editable,
        "env": sorted((k, v) for k, v in env.items() if k.startswith("HVD_SELECTOR") or k in DETECTION_ENV),
        "config_files": [(str(p), _file_digest(p)) for p in config_files if p.is_file()],
        "host_profile": _file_digest(host_profile),
        "python": [sys.executable, sys.version],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "plans" / f"{key[:32]}.json"


def load(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored plan for ``key``, or None (absent, stale, for another key or unreadable)."""
    raw = read_trusted(_path(cache_dir, key), MAX_AGE_S)  # someone else's, or writable by others: decide afresh
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("plan"), dict):
        return None
    return data["plan"]


def store(cache_dir: Path, key: str, plan: Mapping[str, Any]) -> None:
    """Keep ``plan`` for the other hooks of this install; failing to write only costs a re-decision."""
    from selector_backend.files.atomic import atomic_write_text

    path = _path(cache_dir, key)
    try:
        atomic_write_text(path, json.dumps({"key": key, "plan": dict(plan)}))
        _prune(path.parent)
    except OSError:
        return


def _prune(directory: Path) -> None:
    """Plans past their age are dead weight: remove them (best effort)."""
    now = time.time()
    for old in directory.glob("*.json"):
        try:
            if now - old.stat().st_mtime > MAX_AGE_S:
                old.unlink()
        except OSError:
            continue


def trace(event: str, **fields: Any) -> None:
    """One JSON line per backend decision to ``$HVD_SELECTOR_TRACE`` (debugging, and the tests' counter)."""
    target = os.environ.get("HVD_SELECTOR_TRACE")
    if not target:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(line)
    except OSError:
        return
