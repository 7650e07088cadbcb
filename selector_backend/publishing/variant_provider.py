"""The PEP 825 variant provider for the catalog's namespace (variantlib's plugin API).

A variant-aware installer runs this at install time (``variant_plugins``
entry point, or ``plugin-api`` in variant.json) to learn which property
values this machine supports. It is the engine, not a second copy of it: the
same HostProfile (detection, ``HVD_SELECTOR_*`` overrides, config file,
``--host-profile`` through ``HVD_SELECTOR_HOST_PROFILE``), the same selector
policy and the same compatibility rules (``compat``), with each feature's
values in the order ``resolve.variant_rank`` ranks them. The property model is
``variant_json``'s. Nothing is downloaded, written or compiled; detection
reads /proc, archspec, NVML and MPI's files (see docs/guide/wheel-variants.md).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from selector_backend.engine import compat, resolve, variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import Selector
from selector_backend.engine.variant import AxisValue


@dataclass(frozen=True)
class FeatureConfig:
    """variantlib's ``VariantFeatureConfigType``: a feature and its values, most preferred first."""

    name: str
    values: list[str] = field(default_factory=list)
    multi_value: bool = False


def _subsets(values: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [c for n in range(1, len(values) + 1) for c in itertools.combinations(values, n)]


def cuda_builds(catalog: Catalog) -> list[tuple[str, tuple[str, ...]]]:
    """(line, archs) a ``cuda`` value can name: the prebuilt matrix's sets plus every single arch of each line."""
    seen: dict[tuple[str, tuple[str, ...]], None] = {}
    for v in catalog.prebuilt_variants():
        if v["cuda"] != "none":
            seen.setdefault((str(v["cuda"]), v.values_of("cuda_arch")), None)
    for line, info in catalog.cuda_lines.items():
        for arch in info.archs:
            seen.setdefault((line, (arch,)), None)
    return list(seen)


def _multi_values(axis: str, catalog: Catalog) -> list[tuple[str, ...]]:
    return _subsets(catalog.axes[axis].values)


def _requirements_met(axis: str, values: tuple[str, ...], catalog: Catalog, host: HostProfile) -> bool:
    needs = [cap for v in values for cap in catalog.host_requirements.get((axis, v), ())]
    return all(compat.has_capability(cap, host, catalog.mpi_abi).ok for cap in needs)


def _pinned(axis: str, values: tuple[str, ...], selector: Selector) -> bool:
    pin = selector.pins.get(axis)
    if pin is None:
        return True
    return set(pin) <= set(values) if isinstance(pin, tuple) else values == (pin,)


def all_configs(catalog: Catalog) -> list[FeatureConfig]:
    """Every value each feature can take, in the feature order ``supported_configs`` uses."""
    out = [
        FeatureConfig(
            variant_json.GPU_FEATURE, [variant_json.cuda_value(c, a, catalog) for c, a in cuda_builds(catalog)]
        )
    ]
    for axis in _axes(catalog):
        if catalog.axes[axis].kind == "multi":
            out.append(FeatureConfig(axis, ["_".join(s) for s in _multi_values(axis, catalog)]))
        else:
            out.append(FeatureConfig(axis, [v for v in catalog.axes[axis].values if v != "none"]))
    return [c for c in out if c.values]


def _axes(catalog: Catalog) -> list[str]:
    """Non-CUDA axes, ordered as ``resolve.variant_rank`` weighs them: tensor_ops, target, then the rest."""
    rest = [a for a in catalog.axes if a not in ("cuda", "cuda_arch", "tensor_ops", "target")]
    return [a for a in ("tensor_ops", "target") if a in catalog.axes] + rest


def supported_configs(catalog: Catalog, host: HostProfile, selector: Selector) -> list[FeatureConfig]:
    """Values this host supports, best first; a feature with none is left out (variants using it are rejected)."""
    out: list[FeatureConfig] = []
    gpu_ok = selector.wants_gpu() is not False
    builds = [
        (line, archs)
        for line, archs in cuda_builds(catalog)
        if gpu_ok
        and compat.compatible(compat.check_cuda(archs, catalog.cuda_lines[line].toolkit, host))
        and _pinned("cuda", (line,), selector)
        and _pinned("cuda_arch", archs, selector)
    ]
    builds.sort(key=lambda b: _gpu_rank(b[0], b[1], catalog, host))
    out.append(FeatureConfig(variant_json.GPU_FEATURE, [variant_json.cuda_value(c, a, catalog) for c, a in builds]))
    for axis in _axes(catalog):
        kind = catalog.axes[axis].kind
        candidates = _multi_values(axis, catalog) if kind == "multi" else [(v,) for v in catalog.axes[axis].values]
        ok = [
            c
            for c in candidates
            if "none" not in c
            and _pinned(axis, c, selector)
            and _requirements_met(axis, c, catalog, host)
            and (axis != "target" or compat.check_target(c[0], host).ok)
        ]
        if axis == "target":
            ok.sort(
                key=lambda c: (_probe_rank({"target": c[0]}, catalog, host).target, catalog.axes["target"].order(c[0]))
            )
        elif axis == "controllers":
            ok.sort(key=lambda c: (_probe_rank({"controllers": c}, catalog, host).controllers, len(c)))
        else:
            ok.sort(key=lambda c: tuple(catalog.preference(axis, v) for v in c))
        out.append(FeatureConfig(axis, ["_".join(c) for c in ok]))
    return [c for c in out if c.values]


def _probe_rank(values: dict[str, AxisValue], catalog: Catalog, host: HostProfile) -> resolve.RankKey:
    """The engine's RankKey of a variant that differs from the catalog defaults only in ``values``."""
    return resolve.variant_rank(catalog.make_variant(values, fill_defaults=True), catalog, host)


def _gpu_rank(line: str, archs: tuple[str, ...], catalog: Catalog, host: HostProfile) -> tuple[object, ...]:
    """The RankKey fields a ``cuda`` value decides, in the engine's order."""
    key = _probe_rank({"cuda": line, "cuda_arch": archs}, catalog, host)
    return key.code_kind, key.code_distance, key.cuda_line, key.arch_count


@functools.lru_cache(maxsize=1)
def _catalog() -> Catalog:
    return load_catalog()


def _host_and_selector() -> tuple[HostProfile, Selector]:
    """The engine's own inputs: settings (env, config file), host profile or detection, overrides."""
    from selector_backend.detect import host_profile_for
    from selector_backend.engine.select import Sources, select
    from selector_backend.settings import load_settings

    settings = load_settings()
    selection = select(settings, _catalog(), Sources(lambda: host_profile_for(settings)))
    return selection.host, selection.selector


class HvdSelectorProvider:
    """variantlib plugin API: ``namespace``, ``get_all_configs``, ``get_supported_configs``."""

    namespace = "hvd_selector"  # checked against the catalog by the tests
    all_properties_compatible = False  # answers depend on the machine: not for build-requires

    @classmethod
    def get_all_configs(cls) -> list[FeatureConfig]:
        return all_configs(_catalog())

    @classmethod
    def get_supported_configs(cls) -> list[FeatureConfig]:
        host, selector = _host_and_selector()
        return supported_configs(_catalog(), host, selector)
