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
- The file is reached through ``private_cache``: ``index-pages/`` and the
  cache directory must be the user's own, writable by nobody else and not
  links (else nothing is read or kept there), the file too; it is written
  atomically and read with ``marshal``: local data only, never anything from
  the network, and a file that fails to load or names another key is a miss,
  then rewritten.
- Only the newest ``KEEP`` pages are kept; a temporary file a killed writer
  left behind is removed by the next store. Pruning removes page files by
  their exact name only, never through a link.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from selector_backend.engine.variant import Variant
from selector_backend.files.private_cache import is_keyed_name, keyed_name, open_optional
from selector_backend.install.index_groups import IndexGroup

if TYPE_CHECKING:
    from selector_backend.engine.catalog import Catalog

FORMAT = 1  # bump when what is stored, or what read_index_groups makes of a page, changes
KEEP = 8
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


SUFFIX = ".marshal"


def _name(key: str) -> str:
    return keyed_name(key, SUFFIX)


def is_page(name: str) -> bool:
    """A kept page's file name (pruning removes nothing else)."""
    return is_keyed_name(name, SUFFIX)


def load(cache_dir: Path, key: str, body: bytes) -> list[IndexGroup] | None:
    """The groups stored under ``key`` for exactly the page ``body``, or None (absent, another page,
    not the user's own, unreadable)."""
    pages = open_optional(cache_dir, DIRECTORY, create=False)
    if pages is None:
        return None
    with pages:
        raw = pages.read(_name(key))
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
    rows = [(g.version, g.label, g.variant.pairs(), g.files) for g in groups]
    pages = open_optional(cache_dir, DIRECTORY, create=True)
    if pages is None:
        return
    with pages:
        try:
            pages.write(_name(key), marshal.dumps((key, body, rows)))  # a torn file loads as a miss
            pages.prune(is_page, keep=KEEP)  # another process may be pruning too: best effort
        except (OSError, ValueError):
            return


def entries(cache_dir: Path) -> list[Path]:
    """The stored pages, in name order."""
    pages = open_optional(cache_dir, DIRECTORY, create=False)
    if pages is None:
        return []
    with pages:
        return [pages.path / name for name, _ in pages.entries() if is_page(name)]
