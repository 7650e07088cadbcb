"""A variant-index page once read: its wheels grouped by variant.

``variant_index.read_index_groups`` makes these from a page and
``index_cache`` keeps them for the same page bytes; both import the type
from here, so the reader depends on the cache and never the other way.
"""

from __future__ import annotations

from typing import NamedTuple

from selector_backend.engine.variant import Variant


class IndexGroup(NamedTuple):
    """The wheels of one variant of one release, in listing order.

    ``files`` holds ``(position, filename, url, sha256, tag)`` with the wheel's
    place among the page's files and its ``python-abi-platform`` tag: plain
    tuples, since an index has thousands.
    """

    version: str
    label: str
    variant: Variant
    files: list[tuple[int, str, str, str, str]]
