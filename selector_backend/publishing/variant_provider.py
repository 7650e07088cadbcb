"""The PEP 825 variant provider for the catalog's own namespace (variantlib's plugin API).

A variant-aware installer that runs Python providers (variantlib) runs this
at install time (``plugin-api`` in variant.json) to learn which values of
``hvd_selector`` features this machine supports: the CPU targets no
standard level expresses, the tensor ops, controllers and frameworks
(MPI needs a runtime), and whether a CPU build may be installed
(``nvidia_gpu :: unused``: on a host without NVIDIA GPUs, or where the CPU
build is asked for; never by default on a GPU host, the rule of
docs/guide/install.md). The standard namespaces (``x86_64``, ``nvidia``) are
the standard providers' (``variant_json``). It ships as its own small
distribution, ``hvd-selector-variant-provider`` (``provider_dist``), so an
installer installs it without the package it chooses.

It is the engine, not a second copy of it: the same HostProfile (detection,
``HVD_SELECTOR_*`` overrides, config file, ``--host-profile`` through
``HVD_SELECTOR_HOST_PROFILE``), the same selector policy and the same
compatibility rules (``compat``), with each feature's values in the order
``resolve.variant_rank`` ranks them. Nothing is downloaded, written or compiled;
detection reads /proc, archspec, NVML and MPI's files (see
docs/guide/wheel-variants.md).
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
    out = []
    for axis in _axes(catalog):
        if catalog.axes[axis].kind == "multi":
            out.append(FeatureConfig(axis, ["_".join(s) for s in _multi_values(axis, catalog)]))
        else:
            out.append(FeatureConfig(axis, [v for v in _own_values(axis, catalog) if v != "none"]))
    if "cuda" in catalog.axes:
        out.append(FeatureConfig(variant_json.CPU_BUILD[0], [variant_json.CPU_BUILD[1]]))
    return [c for c in out if c.values]


def cpu_build_wanted(host: HostProfile, selector: Selector) -> bool:
    """A CPU build may be installed here: the selector asks for one, or leaves it to a host without NVIDIA GPUs."""
    wants_gpu = selector.wants_gpu()
    return not wants_gpu if wants_gpu is not None else not host.nvidia_gpus()


def _own_values(axis: str, catalog: Catalog) -> tuple[str, ...]:
    """An axis's values our namespace can carry: a target only where no standard level names it."""
    values = catalog.axes[axis].values
    return tuple(v for v in values if v not in variant_json.X86_64_LEVELS) if axis == "target" else values


def _axes(catalog: Catalog) -> list[str]:
    """Our namespace's features, ordered as ``resolve.variant_rank`` weighs them: tensor_ops, target, the rest."""
    rest = [a for a in variant_json.own_axes(catalog) if a != "tensor_ops"]
    return [a for a in ("tensor_ops", "target") if a in catalog.axes] + rest


def supported_configs(catalog: Catalog, host: HostProfile, selector: Selector) -> list[FeatureConfig]:
    """Values this host supports, best first; a feature with none is left out (variants using it are rejected)."""
    out: list[FeatureConfig] = []
    for axis in _axes(catalog):
        kind = catalog.axes[axis].kind
        candidates = _multi_values(axis, catalog) if kind == "multi" else [(v,) for v in _own_values(axis, catalog)]
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
    if "cuda" in catalog.axes and cpu_build_wanted(host, selector):
        out.append(FeatureConfig(variant_json.CPU_BUILD[0], [variant_json.CPU_BUILD[1]]))
    return [c for c in out if c.values]


def _probe_rank(values: dict[str, AxisValue], catalog: Catalog, host: HostProfile) -> resolve.RankKey:
    """The engine's RankKey of a variant that differs from the catalog defaults only in ``values``."""
    return resolve.variant_rank(catalog.make_variant(values, fill_defaults=True), catalog, host)


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

    namespace = _catalog().namespace  # hvd_selector, or the namespace of the project whose catalog it carries
    all_properties_compatible = False  # answers depend on the machine: not for build-requires

    @classmethod
    def get_all_configs(cls) -> list[FeatureConfig]:
        return all_configs(_catalog())

    @classmethod
    def get_supported_configs(cls) -> list[FeatureConfig]:
        host, selector = _host_and_selector()
        return supported_configs(_catalog(), host, selector)
