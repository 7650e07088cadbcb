"""variant.json (PEP 825, as variantlib 0.2.2 reads it): the one record of what a wheel was built as.

Written by ``cmake_config`` during every build (so it describes what CMake
actually compiled) and read by the import guard, ``doctor``, the index
publisher and the fetcher.

The property model (docs/guide/wheel-variants.md): every property lives in
the catalog's own namespace and is served by the project's install-time
provider (``selector_backend.publishing.variant_provider``). Each feature is
single-valued, because PEP 825 matches a multi-valued feature when *any*
value is supported while the engine needs *all* of them (both controllers,
every GPU served):

- ``target :: x86_64_v3``                 the CPU target
- ``cuda :: cu12_sm80_sm90``              CUDA line + the cuda_arch set; absent
                                           on a CPU-only build (no ``none``)
- ``tensor_ops :: nccl``
- ``controllers :: gloo_mpi``             a multi-valued axis: values joined by
- ``frameworks :: pytorch``               ``_`` in catalog axis order

Documents of earlier releases (schema v0.0.3: axis -> list of values with
``none`` sentinels) are still read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.variant import AxisValue, Variant, variant_label
from selector_backend.errors import InputError

SCHEMA_URL = "https://variants-schema.wheelnext.dev/v0.2.0.json"
LEGACY_SCHEMA_URLS = ("https://variants-schema.wheelnext.dev/v0.0.3.json",)
PLUGIN_API = "selector_backend.publishing.variant_provider:HvdSelectorProvider"
GPU_FEATURE = "cuda"  # carries the cuda and cuda_arch axes together
_CUDA_VALUE = re.compile(r"cu([0-9a-z.]+)((?:_sm[0-9a-z]+)+)")


def _joined(axis_values: tuple[str, ...], catalog: Catalog, axis: str) -> str:
    ordered = sorted(axis_values, key=catalog.axes[axis].order)
    if any("_" in v for v in ordered) and len(ordered) > 1:
        raise InputError(f"axis {axis!r}: values of a multi-valued axis must not contain '_' ({ordered})")
    return "_".join(ordered)


def cuda_value(cuda: str, archs: tuple[str, ...], catalog: Catalog) -> str:
    """``cu12_sm80_sm90``: one value for the CUDA line and its arch set."""
    return f"cu{cuda}" + "".join(f"_sm{a}" for a in sorted(archs, key=catalog.axes["cuda_arch"].order))


def properties(variant: Variant, catalog: Catalog) -> dict[str, list[str]]:
    """feature -> [value] of ``variant`` in the project's namespace (see the module doc)."""
    out: dict[str, list[str]] = {}
    for axis in catalog.axes:
        if axis == "cuda_arch":
            continue
        if axis == "cuda":
            if variant["cuda"] != "none":
                out[GPU_FEATURE] = [cuda_value(str(variant["cuda"]), variant.values_of("cuda_arch"), catalog)]
            continue
        values = tuple(v for v in variant.values_of(axis) if v != "none")
        if values:
            out[axis] = [_joined(values, catalog, axis) if catalog.axes[axis].kind == "multi" else values[0]]
    return out


FeatureMemo = dict[tuple[str, str | None], tuple[tuple[str, AxisValue], ...]]
"""(feature, value text, or None where it is absent) -> the axis values it sets: shared by the variants of one
catalog."""


def variant_from_properties(features: Mapping[str, Any], catalog: Catalog, memo: FeatureMemo | None = None) -> Variant:
    """The inverse of ``properties``; anything off is an InputError.

    An index's variants repeat a few feature values thousands of times: a
    caller reading many may pass a ``memo`` so each is parsed once.
    """
    if memo is None:
        memo = {}
    values: dict[str, AxisValue] = {}
    for feature, raw in features.items():
        if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], str):
            raise InputError(f"feature {feature!r} must have exactly one value, got {raw!r}")
        parsed = memo.get((feature, raw[0]))
        if parsed is None:
            parsed = memo[feature, raw[0]] = _feature_values(feature, raw[0], catalog)
        values.update(parsed)
    if GPU_FEATURE not in features and "cuda" in catalog.axes:  # a CPU-only build lacks the feature
        parsed = memo.get((GPU_FEATURE, None))
        if parsed is None:
            none = (
                ("cuda", catalog.parse_value("cuda", "none")),
                ("cuda_arch", catalog.parse_value("cuda_arch", "none")),
            )
            parsed = memo[GPU_FEATURE, None] = none
        values.update(parsed)
    return catalog.make_variant(values)


def _feature_values(feature: str, text: str, catalog: Catalog) -> tuple[tuple[str, AxisValue], ...]:
    """The axis values one feature's value sets (the GPU feature sets two)."""
    if feature == GPU_FEATURE:
        match = _CUDA_VALUE.fullmatch(text)
        if not match:
            raise InputError(f"feature 'cuda': {text!r} is not cu<line>_sm<arch>[_sm<arch>...]")
        return (
            ("cuda", catalog.parse_value("cuda", match.group(1))),
            ("cuda_arch", catalog.parse_value("cuda_arch", match.group(2)[3:].split("_sm"))),
        )
    if feature in ("cuda", "cuda_arch") or feature not in catalog.axes:
        raise InputError(f"unknown feature {feature!r}; features: {', '.join(sorted(_features(catalog)))}")
    if catalog.axes[feature].kind == "multi":
        return ((feature, catalog.parse_value(feature, text.split("_"))),)
    return ((feature, catalog.parse_value(feature, text)),)


def _features(catalog: Catalog) -> list[str]:
    return [GPU_FEATURE if a == "cuda" else a for a in catalog.axes if a != "cuda_arch"]


def provider_table(catalog: Catalog) -> dict[str, Any]:
    """``providers``: the install-time plugin that ships in the project's own distribution."""
    return {
        catalog.namespace: {
            "requires": [f"{catalog.name}=={catalog.version}"],
            "plugin-api": PLUGIN_API,
        }
    }


def header(catalog: Catalog) -> dict[str, Any]:
    """What a wheel's variant.json and the index file have in common."""
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": [catalog.namespace]},
        "providers": provider_table(catalog),
    }


def render(variant: Variant, catalog: Catalog) -> dict[str, Any]:
    return {**header(catalog), "variants": {variant_label(variant): {catalog.namespace: properties(variant, catalog)}}}


def dumps(variant: Variant, catalog: Catalog) -> str:
    return json.dumps(render(variant, catalog), indent=2, sort_keys=False) + "\n"


def check_features(features: Any, source: str) -> dict[str, list[str]]:
    """A namespace's features as feature -> [values]: strings only (a value may be one string)."""
    if not isinstance(features, dict):
        raise InputError(f"{source}: must map features to value lists")
    out: dict[str, list[str]] = {}
    for key, value in features.items():
        if type(value) is list and len(value) == 1 and type(value[0]) is str:  # the usual shape, at index scale
            out[key] = value
            continue
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError(f"{source}: feature {key!r} must be a string or a list of strings, not {value!r:.80}")
        out[key] = values
    return out


def variant_of(
    label: str, namespaces: Any, catalog: Catalog, *, legacy: bool = False, memo: FeatureMemo | None = None
) -> Variant:
    """The catalog variant one ``variants`` entry describes (current or legacy shape); ``memo``: see
    ``variant_from_properties``."""
    if not isinstance(namespaces, dict) or catalog.namespace not in namespaces:
        raise InputError(f"variant {label!r} has no {catalog.namespace!r} namespace")
    features = check_features(namespaces[catalog.namespace], f"namespace {catalog.namespace!r}")
    try:
        if legacy:  # schema v0.0.3: axis -> values, 'none' sentinels
            return catalog.make_variant(
                catalog.parse_assignments({k: v if isinstance(v, list) else [v] for k, v in features.items()})
            )
        return variant_from_properties(features, catalog, memo)
    except InputError as exc:
        raise InputError(f"variant {label!r}: {exc}") from None


def is_legacy(data: Mapping[str, Any]) -> bool:
    """A document from an earlier release (schema v0.0.3); anything else unknown is refused."""
    schema = data.get("$schema")
    if schema in LEGACY_SCHEMA_URLS:
        return True
    if schema != SCHEMA_URL:
        raise InputError(
            f"unsupported variant schema {schema!r} (this version reads {SCHEMA_URL} "
            f"and {', '.join(LEGACY_SCHEMA_URLS)}); upgrade hvd-selector"
        )
    return False


def parse(data: Any, catalog: Catalog, *, source: str = "variant.json") -> tuple[str, Variant]:
    """(label, variant) from a variant.json document; malformed is an InputError."""
    if isinstance(data, (str, bytes)):
        from selector_backend.files.safeparse import loads

        data = loads(data, source)
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(variants, dict) or len(variants) != 1:
        raise InputError(f"{source}: expected exactly one entry under 'variants'")
    ((label, namespaces),) = variants.items()
    try:
        return str(label), variant_of(str(label), namespaces, catalog, legacy=is_legacy(data))
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
