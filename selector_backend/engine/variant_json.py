"""variant.json (PEP 825): the one record of what a wheel was built as, in the terms installers read.

Written by ``cmake_config`` during every build (so it describes what CMake
actually compiled) and read by the import guard, ``doctor``, the index
publisher, the fetcher, and by variant-aware installers themselves.

The property model (docs/guide/wheel-variants.md): a wheel says in the
standard providers' namespaces whatever they can say exactly, because a
native installer (uv) evaluates only those, with providers built into it;
the catalog's own namespace keeps what no standard covers:

- ``x86_64 :: level :: v3``               target x86_64_v3 (x86_64 is v1); the psABI
                                           levels are archspec's x86_64_vN feature sets
- ``nvidia :: cuda_version_lower_bound :: 12.0``   the CUDA line: a build with toolkit
                                           M.n runs on a driver supporting M.0 (minor-
                                           version compatibility); no upper bound: a newer
                                           driver runs an older line
- ``nvidia :: sm_arch :: 80_real, 90_real[, 90_virtual]``   SASS per arch; PTX of the
                                           highest arch is named only when the toolkit is
                                           M.0, because a GPU served through PTX needs a
                                           driver >= the toolkit's M.n, which the lower
                                           bound could not say
- ``hvd_selector :: target :: neoverse_v1``   a target no standard level expresses
                                           (every aarch64 target: archspec's Neoverse
                                           targets are not a linear Arm version)
- ``hvd_selector :: tensor_ops :: mpi``, ``controllers :: gloo_mpi``, ``frameworks``:
                                           only where they differ from what the build
                                           implies (nccl for a CUDA build, else gloo;
                                           the catalog defaults for the others)
- ``hvd_selector :: nvidia_gpu :: unused``  every CPU build (of a catalog with a ``cuda``
                                           axis): its provider supports it only on a host
                                           without NVIDIA GPUs or where the CPU build is
                                           asked for (``HVD_SELECTOR=cpu``, the config
                                           file). No standard property can say "no NVIDIA
                                           GPU" (a provider only ever adds properties), so
                                           this is the one choice only our code makes

A native installer has no provider for ``hvd_selector`` and treats its
properties as unsupported (uv 0.13.9: "Skipping unsupported wheel variant
provider"), so it can only ever pick a wheel described entirely in standard
terms, which are exact: it can never pick an MPI build, an aarch64 build
whose CPU it cannot judge, a GPU build without a GPU, or a CPU build on a GPU host
(the CPU-build property: uv falls back to the sdist, whose backend applies the one rule
of docs/guide/install.md, "A GPU host no GPU build fits"). The project's own
provider (``hvd-selector-variant-provider``) answers the ``hvd_selector``
namespace for installers that run Python providers (variantlib).

Each feature of our namespace is single-valued: PEP 825 matches a
multi-valued feature when *any* value is supported while the engine needs
*all* of them (both controllers). Documents of earlier releases (the
namespace-only model of schema ``v0.2.0.json``, and ``v0.0.3``'s lists with
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

# What uv (0.13.9, --preview-features wheel-variants) and variantlib 0.2.2 both read; variantlib does not
# check $schema, and writes its own (PREVIOUS_SCHEMA_URL) when it regenerates an index file.
SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
PREVIOUS_SCHEMA_URL = "https://variants-schema.wheelnext.dev/v0.2.0.json"  # the namespace-only model
LEGACY_SCHEMA_URLS = ("https://variants-schema.wheelnext.dev/v0.0.3.json",)

# The standard providers uv has built in, named as it recognises them (package in requires, plugin-api).
X86_64 = "x86_64"
NVIDIA = "nvidia"
STANDARD_PROVIDERS: dict[str, dict[str, Any]] = {
    NVIDIA: {
        "requires": ["nvidia-variant-provider"],
        "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
    },
    X86_64: {"requires": ["x86-64-variant-provider"]},
}
X86_64_LEVELS = {"x86_64": "v1", "x86_64_v2": "v2", "x86_64_v3": "v3", "x86_64_v4": "v4"}
LOWER_BOUND = "cuda_version_lower_bound"
SM_ARCH = "sm_arch"
PROVIDER_DIST = "hvd-selector-variant-provider"  # a separate distribution: it never requires what it chooses
PLUGIN_API = "hvd_selector_variant_provider:HvdSelectorProvider"
OWN_FEATURES = ("target", "tensor_ops", "controllers", "frameworks")  # hvd-selector's; own_axes() is any catalog's
STANDARD_AXES = ("target", "cuda", "cuda_arch")  # said in the standard namespaces (target where a level says it)
PREVIOUS_GPU_FEATURE = "cuda"  # the namespace-only model's cu<line>_sm<arch>... value
CPU_BUILD = ("nvidia_gpu", "unused")  # our namespace's feature and value on every CPU build (module doc)
_CUDA_VALUE = re.compile(r"cu([0-9a-z.]+)((?:_sm[0-9a-z]+)+)")
_SM_VALUE = re.compile(r"([0-9]+[a-z]?)_(real|virtual)")


def _joined(axis_values: tuple[str, ...], catalog: Catalog, axis: str) -> str:
    ordered = sorted(axis_values, key=catalog.axes[axis].order)
    if any("_" in v for v in ordered) and len(ordered) > 1:
        raise InputError(f"axis {axis!r}: values of a multi-valued axis must not contain '_' ({ordered})")
    return "_".join(ordered)


def own_axes(catalog: Catalog) -> tuple[str, ...]:
    """The axes our namespace carries, besides a target no standard level expresses: every axis of the catalog
    that no standard namespace says (hvd-selector's tensor_ops, controllers, frameworks; a project's own)."""
    return tuple(a for a in catalog.axes if a not in STANDARD_AXES)


def implied(axis: str, cuda: str, catalog: Catalog) -> AxisValue:
    """The value an axis takes when our namespace leaves it out: nccl carries a CUDA build, else the default."""
    if axis == "tensor_ops" and cuda != "none":
        return catalog.parse_value("tensor_ops", "nccl")
    return catalog.axes[axis].default


def lower_bound(line: str, catalog: Catalog) -> str:
    """``12.0``: the oldest driver (as a CUDA version) that runs a build of this line."""
    return f"{catalog.cuda_lines[line].toolkit.split('.')[0]}.0"


def sm_archs(line: str, archs: tuple[str, ...], catalog: Catalog) -> list[str]:
    """``sm_arch`` values: SASS of every arch, and the PTX of the highest when the lower bound covers its JIT."""
    ordered = sorted(archs, key=catalog.axes["cuda_arch"].order)
    values = [f"{a}_real" for a in ordered]
    if catalog.cuda_lines[line].toolkit == lower_bound(line, catalog):
        values.append(f"{ordered[-1]}_virtual")
    return values


def properties(variant: Variant, catalog: Catalog) -> dict[str, dict[str, list[str]]]:
    """namespace -> feature -> [values] of ``variant`` (see the module doc)."""
    out: dict[str, dict[str, list[str]]] = {}
    target = str(variant["target"])
    if target in X86_64_LEVELS:
        out[X86_64] = {"level": [X86_64_LEVELS[target]]}
    cuda = str(variant.get("cuda", "none"))
    if cuda != "none":
        archs = variant.values_of("cuda_arch")
        out[NVIDIA] = {LOWER_BOUND: [lower_bound(cuda, catalog)], SM_ARCH: sm_archs(cuda, archs, catalog)}
    own: dict[str, list[str]] = {}
    if target not in X86_64_LEVELS:
        own["target"] = [target]
    if cuda == "none" and "cuda" in catalog.axes:
        own[CPU_BUILD[0]] = [CPU_BUILD[1]]
    for axis in own_axes(catalog):
        if variant[axis] != implied(axis, cuda, catalog):
            values = variant.values_of(axis)
            own[axis] = [_joined(values, catalog, axis) if catalog.axes[axis].kind == "multi" else values[0]]
    if own:
        out[catalog.namespace] = own
    return out


FeatureMemo = dict[tuple[str, str, tuple[str, ...]], tuple[tuple[str, AxisValue], ...]]
"""(namespace, feature, values) -> the axis values they set: shared by the variants of one catalog."""


def variant_from_properties(
    namespaces: Mapping[str, Mapping[str, list[str]]],
    catalog: Catalog,
    memo: FeatureMemo | None = None,
    *,
    canonical: bool = True,
) -> Variant:
    """The inverse of ``properties``; anything off is an InputError.

    ``canonical``: the document must be exactly what ``properties`` writes
    (the current schema), so what an installer reads is what the engine
    reads. An index's variants repeat a few feature values thousands of
    times: a caller reading many may pass a ``memo`` so each is parsed once.
    """
    if memo is None:
        memo = {}
    values: dict[str, AxisValue] = {}
    for namespace, features in namespaces.items():
        if namespace not in (X86_64, NVIDIA, catalog.namespace):
            raise InputError(f"unknown namespace {namespace!r}; namespaces: {X86_64}, {NVIDIA}, {catalog.namespace}")
        for feature, raw in features.items():
            key = (namespace, feature, tuple(raw))
            parsed = memo.get(key)
            if parsed is None:
                parsed = memo[key] = _feature_values(namespace, feature, tuple(raw), catalog)
            values.update(parsed)
    if "target" not in values:
        raise InputError(f"no CPU target: neither {X86_64} :: level nor {catalog.namespace} :: target")
    if (NVIDIA in namespaces) != ("cuda_arch" in values and "cuda" in values) and PREVIOUS_GPU_FEATURE not in (
        namespaces.get(catalog.namespace) or {}
    ):
        raise InputError(f"{NVIDIA} needs both {LOWER_BOUND} and {SM_ARCH}")
    if "cuda" in catalog.axes:
        values.setdefault("cuda", catalog.parse_value("cuda", "none"))
        values.setdefault("cuda_arch", catalog.parse_value("cuda_arch", "none"))
    for axis in own_axes(catalog):
        values.setdefault(axis, implied(axis, str(values.get("cuda", "none")), catalog))
    variant = catalog.make_variant(values)
    if canonical and _described(variant, catalog, namespaces.get(catalog.namespace) or {}) != {
        ns: dict(f) for ns, f in namespaces.items()
    }:
        raise InputError(
            f"properties {json.dumps(namespaces, sort_keys=True)} are not how this release describes "
            f"{json.dumps(variant.to_json())} ({json.dumps(properties(variant, catalog), sort_keys=True)})"
        )
    return variant


def _described(variant: Variant, catalog: Catalog, own: Mapping[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """``properties``, less the CPU-build property where ``own`` lacks it: the previous release's CPU wheels."""
    out = properties(variant, catalog)
    if CPU_BUILD[0] not in own and CPU_BUILD[0] in out.get(catalog.namespace, {}):
        del out[catalog.namespace][CPU_BUILD[0]]
        if not out[catalog.namespace]:
            del out[catalog.namespace]
    return out


def _feature_values(
    namespace: str, feature: str, raw: tuple[str, ...], catalog: Catalog
) -> tuple[tuple[str, AxisValue], ...]:
    """The axis values one feature's values set."""
    where = f"{namespace} :: {feature}"
    if namespace == NVIDIA and feature == SM_ARCH:
        parsed = [_SM_VALUE.fullmatch(v) for v in raw]
        if not raw or not all(parsed):
            raise InputError(f"{where}: {list(raw)!r} are not <arch>_real / <arch>_virtual values")
        real = [m.group(1) for m in parsed if m and m.group(2) == "real"]
        return (("cuda_arch", catalog.parse_value("cuda_arch", real)),)
    if len(raw) != 1:
        raise InputError(f"{where} must have exactly one value, got {list(raw)!r}")
    text = raw[0]
    if namespace == X86_64 and feature == "level":
        target = next((t for t, level in X86_64_LEVELS.items() if level == text), None)
        if target is None:
            raise InputError(f"{where}: unknown level {text!r}; levels: {', '.join(X86_64_LEVELS.values())}")
        return (("target", catalog.parse_value("target", target)),)
    if namespace == NVIDIA and feature == LOWER_BOUND:
        line = next((name for name in catalog.cuda_lines if lower_bound(name, catalog) == text), None)
        if line is None:
            raise InputError(f"{where}: {text!r} is no CUDA line's ({', '.join(catalog.cuda_lines)})")
        return (("cuda", catalog.parse_value("cuda", line)),)
    if namespace == catalog.namespace and feature == PREVIOUS_GPU_FEATURE:  # the namespace-only model
        match = _CUDA_VALUE.fullmatch(text)
        if not match:
            raise InputError(f"feature 'cuda': {text!r} is not cu<line>_sm<arch>[_sm<arch>...]")
        return (
            ("cuda", catalog.parse_value("cuda", match.group(1))),
            ("cuda_arch", catalog.parse_value("cuda_arch", match.group(2)[3:].split("_sm"))),
        )
    if namespace == catalog.namespace and feature == CPU_BUILD[0] and "cuda" in catalog.axes:
        if text != CPU_BUILD[1]:
            raise InputError(f"{where}: {text!r} is not {CPU_BUILD[1]!r}")
        return ()  # what it says (a CPU build) the absence of nvidia properties says; canonical form checks both
    if namespace != catalog.namespace or feature not in ("target", *own_axes(catalog)):
        raise InputError(f"unknown feature {where}")
    if catalog.axes[feature].kind == "multi":
        return ((feature, catalog.parse_value(feature, text.split("_"))),)
    return ((feature, catalog.parse_value(feature, text)),)


def provider_table(catalog: Catalog) -> dict[str, Any]:
    """``providers``: uv's built-in standard providers, and ours in its own small distribution (never the
    package it chooses)."""
    return {
        **STANDARD_PROVIDERS,
        catalog.namespace: {
            "requires": [f"{provider_dist(catalog)}=={catalog.version}"],
            "plugin-api": plugin_api(catalog),
        },
    }


def provider_dist(catalog: Catalog) -> str:
    """The distribution of a project's own provider: ``{name}-variant-provider`` (hvd-selector's: PROVIDER_DIST)."""
    return f"{catalog.name}-variant-provider"


def plugin_api(catalog: Catalog) -> str:
    """``{module}:{Class}`` of a project's own provider (hvd-selector's: PLUGIN_API)."""
    camel = "".join(part.capitalize() for part in catalog.namespace.split("_"))
    return f"{provider_dist(catalog).replace('-', '_')}:{camel}Provider"


def header(catalog: Catalog) -> dict[str, Any]:
    """What a wheel's variant.json and the index file have in common (the same in every wheel, so that
    variantlib merges them into the index file): GPU first, then our namespace, then the CPU level, as
    the engine ranks a GPU build, then the tensor ops, then the target."""
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": [NVIDIA, catalog.namespace, X86_64]},
        "providers": provider_table(catalog),
    }


def render(variant: Variant, catalog: Catalog) -> dict[str, Any]:
    return {**header(catalog), "variants": {variant_label(variant): properties(variant, catalog)}}


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
    """The catalog variant one ``variants`` entry describes (any model this release reads); ``memo``: see
    ``variant_from_properties``.

    A document that uses a standard namespace must be exactly what ``properties`` writes: an installer
    judges those properties by themselves, so they must mean what the engine reads. The namespace-only
    model of the previous schema has none, and is read as written.
    """
    if not isinstance(namespaces, dict):
        raise InputError(f"variant {label!r} is not an object of namespaces")
    checked = {str(ns): check_features(features, f"namespace {ns!r}") for ns, features in namespaces.items()}
    try:
        if legacy:  # schema v0.0.3: axis -> values, 'none' sentinels
            if catalog.namespace not in checked:
                raise InputError(f"no {catalog.namespace!r} namespace")
            features = checked[catalog.namespace]
            return catalog.make_variant(catalog.parse_assignments(dict(features.items())))
        canonical = bool(checked.keys() & STANDARD_PROVIDERS.keys())
        return variant_from_properties(checked, catalog, memo, canonical=canonical)
    except InputError as exc:
        raise InputError(f"variant {label!r}: {exc}") from None


def is_legacy(data: Mapping[str, Any]) -> bool:
    """A document from an earlier release (schema v0.0.3); anything else unknown is refused."""
    schema = data.get("$schema")
    if schema in LEGACY_SCHEMA_URLS:
        return True
    if schema not in (SCHEMA_URL, PREVIOUS_SCHEMA_URL):
        raise InputError(
            f"unsupported variant schema {schema!r} (this version reads {SCHEMA_URL}, {PREVIOUS_SCHEMA_URL} "
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
