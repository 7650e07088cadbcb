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

The plans live in ``<cache-dir>/plans/``, reached through ``private_cache``:
a cache directory or ``plans/`` that is another user's, writable by others or
a link stops the install with one line naming it (the download that follows
would stop there anyway), while one that cannot be made only costs the other
hooks a re-decision. Pruning removes only plan files by their exact name.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from selector_backend.files.private_cache import CacheDir, is_keyed_name, keyed_name, open_optional

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
    """The digest of a file the decision reads, by the reader that reads it (a FIFO or a device is
    "unreadable" here and an error where the file is read)."""
    from selector_backend.errors import InputError
    from selector_backend.files.safeparse import read_bytes

    if path is None:
        return None
    try:
        return hashlib.sha256(read_bytes(path, "file")).hexdigest()
    except InputError:
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


DIRECTORY = "plans"


SUFFIX = ".json"


def _name(key: str) -> str:
    return keyed_name(key, SUFFIX)


def is_plan(name: str) -> bool:
    """A plan's file name (pruning removes nothing else)."""
    return is_keyed_name(name, SUFFIX)


def _plans(cache_dir: Path, create: bool) -> CacheDir | None:
    """``plans/`` of the cache, checked; None where it is absent or cannot be made (an untrusted
    directory is an UntrustedCacheError: see the module docstring)."""
    return open_optional(cache_dir, DIRECTORY, create=create, untrusted="raise")


def load(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored plan for ``key``, or None (absent, stale, for another key or unreadable)."""
    plans = _plans(cache_dir, create=False)
    if plans is None:
        return None
    with plans:
        raw = plans.read(_name(key), MAX_AGE_S)  # someone else's, or writable by others: decide afresh
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("plan"), dict):
        return None
    return data["plan"]


def store(cache_dir: Path, key: str, plan: Mapping[str, Any]) -> None:
    """Keep ``plan`` for the other hooks of this install; failing to write only costs a re-decision."""
    plans = _plans(cache_dir, create=True)
    if plans is None:
        return
    with plans:
        try:
            plans.write(_name(key), json.dumps({"key": key, "plan": dict(plan)}).encode())
            plans.prune(is_plan, max_age_s=MAX_AGE_S)  # past their age they are dead weight
        except OSError:
            return


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
