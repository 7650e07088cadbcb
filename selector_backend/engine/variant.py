"""A variant: one value per catalog axis (a tuple for multi-valued axes).

Variants are plain, hashable, ordered mappings so they can be dictionary keys,
set members and JSON objects. Validation against the axes lives in
``catalog.Catalog.parse_variant``; this module only knows the shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

AxisValue = str | tuple[str, ...]


class Variant(Mapping[str, AxisValue]):
    """An immutable axis -> value mapping in catalog axis order."""

    __slots__ = ("_hash", "_items", "_values")

    def __init__(self, items: Mapping[str, AxisValue] | None = None) -> None:
        self._values: dict[str, AxisValue] = dict(items or {})  # lookups; _items: hashing and order
        self._items: tuple[tuple[str, AxisValue], ...] = tuple(self._values.items())
        self._hash = hash(self._items)

    @classmethod
    def of_pairs(cls, pairs: tuple[tuple[str, AxisValue], ...]) -> Variant:
        """The Variant whose ``pairs()`` these are (a cached copy's): complete and in axis order already."""
        variant = cls.__new__(cls)
        variant._items = pairs
        variant._values = dict(pairs)
        variant._hash = hash(pairs)
        return variant

    def __getitem__(self, axis: str) -> AxisValue:
        return self._values[axis]

    def __contains__(self, axis: object) -> bool:
        return axis in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def pairs(self) -> tuple[tuple[str, AxisValue], ...]:
        """(axis, value) in axis order: ``items()`` without the Mapping view's lookups."""
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Variant):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"Variant({format_variant(self)!r})"

    def values_of(self, axis: str) -> tuple[str, ...]:
        """The value(s) of ``axis`` as a tuple, whatever its kind; () for an axis the catalog does not have."""
        value = self._values.get(axis, ())
        return value if isinstance(value, tuple) else (value,)

    def to_json(self) -> dict[str, str | list[str]]:
        """The **contract** JSON shape: multi-valued axes become lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._items}


def format_variant(variant: Mapping[str, AxisValue]) -> str:
    """``target=x86_64_v3 cuda=none ... controllers=gloo,mpi`` (parseable)."""
    parts = []
    for axis, value in variant.items():
        text = ",".join(value) if isinstance(value, tuple) else value
        parts.append(f"{axis}={text}")
    return " ".join(parts)


def variant_label(variant: Variant) -> str:
    """A short stable label for filenames (PEP 825: 1-16 chars of [0-9a-z_.]).

    A hash of the canonical JSON, so the label changes exactly when the
    variant's properties do and never needs a registry of names.
    """
    import hashlib

    canonical = json.dumps(variant.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]
