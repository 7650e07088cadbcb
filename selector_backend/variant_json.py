"""variant.json (PEP 825 shape): the one record of what a wheel was built as.

Written by ``cmake_config`` during every build (so it describes what CMake
actually compiled) and read by the import guard, ``doctor``, the index
publisher and the fetcher. One entry under ``variants``:
label -> namespace -> feature -> [values].
"""

from __future__ import annotations

import json
from typing import Any

from .catalog import Catalog
from .errors import InputError
from .variant import Variant, variant_label

SCHEMA_URL = "https://variants-schema.wheelnext.dev/v0.0.3.json"


def render(variant: Variant, catalog: Catalog) -> dict[str, Any]:
    features = {axis: list(variant.values_of(axis)) for axis in variant}
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": [catalog.namespace]},
        "variants": {variant_label(variant): {catalog.namespace: features}},
    }


def dumps(variant: Variant, catalog: Catalog) -> str:
    return json.dumps(render(variant, catalog), indent=2, sort_keys=False) + "\n"


def check_features(features: Any, source: str) -> dict[str, list[str]]:
    """A namespace's features as feature -> [values]: strings only (a value may be one string)."""
    if not isinstance(features, dict):
        raise InputError(f"{source}: must map features to value lists")
    out: dict[str, list[str]] = {}
    for key, value in features.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError(f"{source}: feature {key!r} must be a string or a list of strings, not {value!r:.80}")
        out[key] = values
    return out


def parse(data: Any, catalog: Catalog, *, source: str = "variant.json") -> tuple[str, Variant]:
    """(label, variant) from a variant.json document; malformed is an InputError."""
    if isinstance(data, (str, bytes)):
        from .safeparse import loads

        data = loads(data, source)
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, dict) or len(variants) != 1:
        raise InputError(f"{source}: expected exactly one entry under 'variants'")
    ((label, namespaces),) = variants.items()
    if not isinstance(namespaces, dict) or catalog.namespace not in namespaces:
        raise InputError(f"{source}: variant {label!r} has no {catalog.namespace!r} namespace")
    features = check_features(namespaces[catalog.namespace], f"{source}: namespace {catalog.namespace!r}")
    try:
        variant = catalog.make_variant(catalog.parse_assignments(features))
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return str(label), variant
