"""Fleet planning: the fewest variants that give every host its best build.

A host's best build is judged with the resolver's own sort key (GPU first,
communication library, SASS before PTX, newest CUDA line, most specific
target, controllers), leaving out the two tie-breaks that only concern size
and listing order. Two variants that tie on that key are equally good for the
host, so a variant with ``cuda_arch=80,90`` serves an A100 host and an H100
host as well as their own single-arch builds: planning merges such hosts.

Two modes:
- ``exact`` (default): each host's best is its exact source-build variant
  (``resolve.ideal_variant``); hosts whose best builds differ only in
  cuda_arch share one variant with the union of archs. No smaller set exists,
  because hosts in different groups differ in a ranked axis.
- ``matrix``: each host's best is what it would get from the catalog's whole
  prebuilt matrix; the plan is the smallest subset of that matrix that still
  gives every host an equally good variant (greedy set cover; exact on the
  small matrices catalogs have, where it is checked against brute force in
  the tests).

Every assignment is then confirmed by running the real pipeline
(``engine.select``) over the plan's variants alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector_backend.detect.profile_file import with_interpreter_defaults
from selector_backend.engine import compat, resolve
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import Selector
from selector_backend.engine.select import Sources, select_with
from selector_backend.engine.variant import Variant, format_variant, variant_label
from selector_backend.errors import InputError, NothingFitsError
from selector_backend.files import safeparse

MODES = ("exact", "matrix")


def quality(variant: Variant, catalog: Catalog, host: HostProfile) -> resolve.RankKey:
    """The resolver's rank key without the arch-list size, which says nothing about how well a build runs."""
    return resolve.variant_rank(variant, catalog, host)._replace(arch_count=0)


def runs_on(variant: Variant, catalog: Catalog, host: HostProfile, selector: Selector) -> bool:
    """Whether ``variant`` runs on ``host`` and the selector admits it (the resolver's rules for one candidate)."""
    return compat.compatible(resolve.evaluate(resolve.Candidate(variant), catalog, host, selector))


# ------------------------------------------------------------------ fleet input
def load_fleet(path: Path) -> list[tuple[str, HostProfile]]:
    """A fleet file: a JSON list of HostProfile objects, or an object name -> HostProfile."""
    data = safeparse.read_json(path, "fleet file")
    if isinstance(data, list):
        items = [(f"host-{i}", item) for i, item in enumerate(data)]
    elif isinstance(data, dict):
        items = list(data.items())
    else:
        raise InputError(f"{path}: a fleet is a JSON list of host profiles or an object name -> profile")
    if not items:
        raise InputError(f"{path}: the fleet lists no hosts")
    return [
        (name, with_interpreter_defaults(HostProfile.from_json(item, source=f"{path}: host {name}")))
        for name, item in items
    ]


# ------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class Assignment:
    host: str
    variant: Variant | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    mode: str
    selector: Selector
    variants: tuple[Variant, ...]
    served: Mapping[Variant, tuple[str, ...]]
    assignments: tuple[Assignment, ...]
    prebuilt_entry: Mapping[Variant, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "selector": str(self.selector),
            "variants": [
                {
                    "label": variant_label(v),
                    "spec": format_variant(v),
                    "variant": v.to_json(),
                    "prebuilt": self.prebuilt_entry.get(v),
                    "hosts": list(self.served[v]),
                }
                for v in self.variants
            ],
            "hosts": [
                {
                    "name": a.host,
                    "label": variant_label(a.variant) if a.variant is not None else None,
                    "variant": a.variant.to_json() if a.variant is not None else None,
                    "reasons": list(a.reasons),
                }
                for a in self.assignments
            ],
        }


def _chosen(host: HostProfile, variants: Sequence[Variant], catalog: Catalog, selector: Selector) -> Any:
    """What ``select`` picks for ``host`` among ``variants`` (earlier ones win ties)."""
    sources = Sources.fixed(host, [resolve.Candidate(v, order=i) for i, v in enumerate(variants)])
    return select_with(selector, catalog, sources).chosen


def _best_exact(host: HostProfile, catalog: Catalog, selector: Selector) -> Variant:
    return select_with(selector, catalog, Sources.fixed(host)).require_source_build()


def _best_matrix(host: HostProfile, catalog: Catalog, selector: Selector) -> Variant:
    chosen = _chosen(host, catalog.prebuilt_variants(), catalog, selector)
    if chosen is None:
        raise NothingFitsError("no prebuilt variant of the catalog runs on it")
    return chosen.variant


def _merge_by_arch(bests: Sequence[Variant], catalog: Catalog) -> list[Variant]:
    """One variant per group of bests that differ only in cuda_arch (archs united)."""
    groups: dict[tuple[Any, ...], list[Variant]] = {}
    for v in bests:
        groups.setdefault(tuple((a, v[a]) for a in v if a != "cuda_arch"), []).append(v)
    axis = catalog.axes["cuda_arch"]
    out = []
    for members in groups.values():
        archs = {a for m in members for a in m.values_of("cuda_arch")}
        merged = catalog.make_variant({**members[0], "cuda_arch": tuple(sorted(archs, key=axis.order))})
        catalog.check(merged)
        out.append(merged)
    return out


def cover(universe: Sequence[Variant], needs: Mapping[str, set[Variant]]) -> list[Variant]:
    """Greedy set cover: repeatedly take the variant serving most unserved hosts (universe order breaks ties)."""
    left = {h for h, s in needs.items() if s}
    chosen: list[Variant] = []
    while left:
        best = max(universe, key=lambda v: (sum(1 for h in left if v in needs[h]), -universe.index(v)))
        gained = {h for h in left if best in needs[h]}
        if not gained:
            break
        chosen.append(best)
        left -= gained
    return chosen


def smallest_cover(universe: Sequence[Variant], needs: Mapping[str, set[Variant]], limit: int = 12) -> list[Variant]:
    """The exact minimum (brute force) when the universe is small, else the greedy cover."""
    useful = [v for v in universe if any(v in s for s in needs.values())]
    hosts = [h for h, s in needs.items() if s]
    if len(useful) <= limit:
        for size in range(1, len(useful) + 1):
            for combo in itertools.combinations(useful, size):
                if all(any(v in needs[h] for v in combo) for h in hosts):
                    return list(combo)
    return cover(useful, needs)


def make_plan(
    fleet: Sequence[tuple[str, HostProfile]], catalog: Catalog, selector: Selector, mode: str = "exact"
) -> Plan:
    if mode not in MODES:
        raise InputError(f"unknown plan mode {mode!r}; valid: {', '.join(MODES)}")
    best_of = _best_exact if mode == "exact" else _best_matrix
    bests: dict[str, Variant] = {}
    problems: dict[str, str] = {}
    for name, host in fleet:
        try:
            bests[name] = best_of(host, catalog, selector)
        except (NothingFitsError, InputError) as exc:
            problems[name] = str(exc)
    hosts = dict(fleet)
    universe = _merge_by_arch(list(bests.values()), catalog) if mode == "exact" else catalog.prebuilt_variants()
    needs: dict[str, set[Variant]] = {}
    for name, best in bests.items():
        host = hosts[name]
        target = quality(best, catalog, host)
        needs[name] = {
            v for v in universe if runs_on(v, catalog, host, selector) and quality(v, catalog, host) == target
        }
        if not needs[name]:  # cannot happen for exact merges; guards matrix oddities
            problems[name] = f"no planned variant is as good as its best, {format_variant(best)}"
    chosen = smallest_cover(universe, needs)
    order = {v: i for i, v in enumerate(universe)}
    chosen.sort(key=lambda v: order[v])

    assignments: list[Assignment] = []
    served: dict[Variant, list[str]] = {v: [] for v in chosen}
    for name, host in fleet:
        if name in problems:
            assignments.append(Assignment(name, None, (problems[name],)))
            continue
        picked = _chosen(host, chosen, catalog, selector)
        if picked is None or picked.variant not in needs[name]:
            raise AssertionError(f"plan check failed for host {name}")  # a bug, not bad input
        served[picked.variant].append(name)
        assignments.append(Assignment(name, picked.variant, picked.reasons))
    entry = {v: e.name for e in reversed(catalog.prebuilt) for v in e.variants}
    return Plan(
        mode,
        selector,
        tuple(chosen),
        {v: tuple(h) for v, h in served.items()},
        tuple(assignments),
        {v: entry[v] for v in chosen if v in entry},
    )


def load_plan_variants(path: Path, catalog: Catalog) -> list[Variant]:
    """The variants of a plan file written by ``hvd-selector plan --json``."""
    data = safeparse.read_json(path, "plan file")
    try:
        items = data["variants"]
        if not isinstance(items, list):
            raise TypeError("'variants' is not a list")
    except (KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a plan file from `hvd-selector plan --json` ({exc})") from None
    out = []
    for i, item in enumerate(items):
        try:
            variant = catalog.make_variant(catalog.parse_assignments(item["variant"]))
        except (KeyError, TypeError):
            raise InputError(f"{path}: variants[{i}] has no 'variant' object") from None
        except InputError as exc:
            raise InputError(f"{path}: variants[{i}]: {exc}") from None
        catalog.check(variant)
        out.append(variant)
    return out
