"""Parsed variant-index pages, kept between runs (as uv keeps parsed Simple API pages).

Reading a project page of 10,000 wheels is mostly parsing: ``json.loads`` of
the page and of its variants files, a split of every wheel name, a variant
built for every label. What comes out depends only on the bytes read, the
page's URL, the origins its links may use and the catalog's axes, so it is
kept in the cache directory under a digest of exactly those; the next read
of the same page bytes loads the result instead of parsing again.

Safety:

- The page is still fetched on every read and compared whole with the bytes
  the result was parsed from: a changed page is a miss, never a stale answer
  (and replaces the entry: one per page URL, catalog and link policy).
- A result is stored only when the page pins every variants file it used by
  sha256 (so the page's bytes decide theirs) and no wheel was skipped with a
  warning (a load could not repeat the warning).
- The file is the user's own (``private_cache.read_trusted``), written atomically,
  and read with ``marshal``: local data only, never anything from the network,
  and a file that fails to load or names another key is a miss, then
  rewritten.
- Only the newest ``KEEP`` pages are kept; a temporary file a killed writer
  left behind is removed by the next store.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from selector_backend.engine.variant import Variant
from selector_backend.files.private_cache import read_trusted
from selector_backend.install.index_groups import IndexGroup

if TYPE_CHECKING:
    from selector_backend.engine.catalog import Catalog

FORMAT = 1  # bump when what is stored, or what read_index_groups makes of a page, changes
KEEP = 8
ABANDONED_S = 600.0
DIRECTORY = "index-pages"


def page_key(page_url: str, kind: str, catalog: Catalog, allowed_origins: Sequence[str]) -> str:
    """A digest of every input of ``read_index_groups``'s result but the page's bytes, which are
    stored beside the result and compared whole (a memcmp: cheaper than hashing them)."""
    axes = [[a.name, a.kind, list(a.values), a.default] for a in catalog.axes.values()]
    parts = [
        FORMAT,
        page_url,
        kind,
        catalog.name,
        catalog.version,  # a new release reads afresh, whatever FORMAT says
        catalog.namespace,
        axes,
        list(allowed_origins),
        list(sys.version_info[:2]),
        marshal.version,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _path(cache_dir: Path, key: str) -> Path:
    return cache_dir / DIRECTORY / f"{key[:32]}.marshal"


def load(cache_dir: Path, key: str, body: bytes) -> list[IndexGroup] | None:
    """The groups stored under ``key`` for exactly the page ``body``, or None (absent, another page,
    not the user's own, unreadable)."""
    raw = read_trusted(_path(cache_dir, key))
    if raw is None:
        return None
    try:
        stored, page, rows = marshal.loads(raw)
        if stored != key or page != body:
            return None
        new, of_pairs = tuple.__new__, Variant.of_pairs
        return [new(IndexGroup, (version, label, of_pairs(pairs), files)) for version, label, pairs, files in rows]
    except (EOFError, ValueError, TypeError):  # marshal's complaints about a damaged file
        return None


def store(cache_dir: Path, key: str, body: bytes, groups: Sequence[IndexGroup]) -> None:
    """Keep ``groups`` as what the page ``body`` holds; a cache that cannot be written only costs the
    next read a parse."""
    from selector_backend.files.atomic import atomic_write_bytes

    rows = [(g.version, g.label, g.variant.pairs(), g.files) for g in groups]
    path = _path(cache_dir, key)
    try:
        atomic_write_bytes(path, marshal.dumps((key, body, rows)), durable=False)  # a torn file loads as a miss
        _prune(path.parent)
    except (OSError, ValueError):
        return


def _prune(directory: Path) -> None:
    """All but the newest ``KEEP`` pages go, and so do temporary files a killed writer left
    (older than ``ABANDONED_S``: a younger one may be another process's write in flight).
    Best effort: another process may be pruning too."""
    now = time.time()
    aged: list[tuple[float, Path]] = []
    for item in directory.glob("*"):
        try:
            mtime = item.stat().st_mtime
        except OSError:
            continue
        if item.suffix == ".marshal":
            aged.append((mtime, item))
        elif item.name.startswith(".") and item.suffix == ".tmp" and now - mtime > ABANDONED_S:
            item.unlink(missing_ok=True)
    for _, old in sorted(aged, reverse=True)[KEEP:]:
        old.unlink(missing_ok=True)


def entries(cache_dir: Path) -> list[Path]:
    """The stored pages, in name order."""
    return sorted((cache_dir / DIRECTORY).glob("*.marshal"))
