"""Pick the prebuilt spec of a build-cache listing that a host should install.

Every entry becomes an engine ``Candidate`` (its spec mapped to catalog
values; ``spack_sources``) with one Spack-specific finding, the ``os`` rule, plus a failing
finding for anything that is no build of this library (``+rocm``, values the
catalog lacks). ``engine.select`` then applies the engine's rules (target
ancestry, CUDA archs with toolkit=None since a listing does not record the
CUDA version, host requirements, selector) and ranks them.

A Spack install brings the spec's whole DAG, MPI included (py-horovod
``depends_on("mpi", when="controllers=mpi")``), so a host without an MPI
runtime is treated as having the one the spec installs.

Tie-break among equally ranked specs (identical variants and target): the
host's exact os first (it matters with ``--any-os``), then the newest
compiler, then the smallest hash, so the answer never depends on the order
of the listing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding, check_cuda, check_os
from selector_backend.engine.host import HostProfile, LibraryInfo
from selector_backend.engine.policy import Selector
from selector_backend.engine.resolve import Candidate, Ranked, Resolution
from selector_backend.engine.select import Selection, Sources, select_with
from selector_backend.interop.spack.listing import Listing, ListingEntry
from selector_backend.interop.spack.mapping import default_version, spec_to_values, variant_to_spec
from selector_backend.interop.spack.spec import SpackSpec, format_spec

SPACK_MPI = LibraryInfo("spack", None, "installed with the spec as its ^mpi dependency")
SPACK_MPI_NOTE = (
    "the host has no MPI runtime; a Spack install brings the spec's own ^mpi, so MPI builds count as usable"
)


@dataclass(frozen=True)
class Pick:
    listing: Listing
    resolution: Resolution
    build_spec: SpackSpec | None
    notes: tuple[str, ...]

    @property
    def selected(self) -> Ranked | None:
        return self.resolution.selected

    def to_json(self) -> dict[str, Any]:
        def entry_json(ranked: Ranked, full: bool) -> dict[str, Any]:
            extra = dict(ranked.candidate.extra)
            out: dict[str, Any] = {
                "hash": extra["hash"],
                "spec": extra["spec"],
                "compatible": ranked.compatible,
                "reasons": list(ranked.reasons),
            }
            if full:
                out.update(
                    {
                        "install": f"spack install /{extra['hash']}",
                        "os": extra["os"],
                        "target": extra["target"],
                        "compiler": extra["compiler"],
                        "stacks": extra["stacks"],
                        "variant": ranked.variant.to_json(),
                    }
                )
            return out

        sel = self.resolution.selected
        return {
            "listing": {
                "source": self.listing.source,
                "format": self.listing.format,
                "package": self.listing.package,
                "specs": len(self.listing.entries),
            },
            "selector": str(self.resolution.selector),
            "selected": None if sel is None else entry_json(sel, True),
            "candidates": [entry_json(r, False) for r in self.resolution.candidates],
            "build_instead": None
            if self.build_spec is None or sel is not None
            else {
                "spec": format_spec(self.build_spec),
                "variant": None if self.resolution.source_build is None else self.resolution.source_build.to_json(),
            },
            "notes": list(self.notes),
        }


def _compiler_version(compiler: str | None) -> Version:
    text = (compiler or "").partition("@")[2].lstrip("=")
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def _tie_key(entry: ListingEntry, host: HostProfile) -> tuple[Any, ...]:
    return (entry.spec.os != host.os, tuple(-p for p in _compiler_version(entry.spec.compiler).release), entry.hash)


def spack_host(host: HostProfile) -> HostProfile:
    """The host as a Spack install sees it: MPI comes with the spec when the host has none (SPACK_MPI_NOTE)."""
    if host.library("mpi") is not None:
        return host
    return host._replace(libraries={**dict(host.libraries), "mpi": SPACK_MPI})


def _recorded_cuda(version: str | None, values: dict[str, Any], catalog: Catalog, host: HostProfile) -> list[Finding]:
    """An index records ^cuda@X.Y: the driver must support that, not just the catalog line's toolkit."""
    line = catalog.cuda_lines.get(str(values["cuda"]))
    archs = values["cuda_arch"]
    if version is None or line is None or not host.nvidia_gpus():
        return []
    major_minor = ".".join(version.split(".")[:2])
    if major_minor == line.toolkit:
        return []
    return [check_cuda(archs, major_minor, host)[-1]]


def candidates(listing: Listing, host: HostProfile, catalog: Catalog, any_os: bool) -> list[Candidate]:
    """One engine Candidate per listing entry, ``order`` = the documented tie-break."""
    ordered = sorted(listing.entries, key=lambda e: _tie_key(e, host))
    out = []
    for order, entry in enumerate(ordered):
        mapped = spec_to_values(entry.spec, catalog, strict=False)
        findings = [check_os(entry.spec.os or "", host, relax=any_os)]
        if host.platform is not None and entry.spec.platform not in (None, host.platform):
            findings.append(Finding(False, f"platform {entry.spec.platform} is not the host's {host.platform}"))
        findings += [Finding(False, p) for p in mapped.problems]
        findings += _recorded_cuda(mapped.cuda_version, mapped.values, catalog, host)
        extra = {
            "hash": entry.hash,
            "spec": format_spec(replace(entry.spec, hash=None)),
            "os": entry.spec.os,
            "target": entry.spec.target,
            "compiler": entry.spec.compiler,
            "stacks": list(entry.stacks),
        }
        out.append(
            Candidate(
                mapped.variant(catalog),
                source=f"spack:{listing.source}",
                extra=extra,
                findings=tuple(findings),
                order=order,
            )
        )
    return out


def spack_sources(host: Callable[[], HostProfile], listing: Listing, catalog: Catalog, any_os: bool) -> Sources:
    """``select``'s sources for a build-cache listing: the host as a Spack install sees it, each entry a candidate."""
    return Sources(lambda: spack_host(host()), lambda view: candidates(listing, view, catalog, any_os))


def spack_catalog(catalog: Catalog) -> Catalog:
    """A Spack binary links the MPI of its own DAG: the prebuilt-wheel MPI ABI rule does not apply."""
    return catalog._replace(mpi_abi=None)


def pick_of(listing: Listing, catalog: Catalog, selection: Selection) -> Pick:
    """The Pick for a selection made over ``listing``: when nothing fits, the spec to build instead."""
    build = None
    source = selection.resolution.source_build
    if source is not None:
        package = listing.package or catalog.spack_package
        versions = sorted({e.spec.version for e in listing.entries if e.spec.version}, key=_version_key)
        version = versions[-1] if versions else default_version(package, catalog)
        build = variant_to_spec(source, package, version)
    notes = [SPACK_MPI_NOTE] if selection.host.library("mpi") is SPACK_MPI else []
    return Pick(listing, selection.resolution, build, (*notes, *selection.resolution.notes))


def pick(listing: Listing, host: HostProfile, catalog: Catalog, selector: Selector, *, any_os: bool = False) -> Pick:
    """Rank every listed spec for ``host``; when none fits, the spec to build instead."""
    sources = spack_sources(lambda: host, listing, catalog, any_os)
    return pick_of(listing, catalog, select_with(selector, spack_catalog(catalog), sources))


def _version_key(text: str) -> tuple[int, Any]:
    try:
        return (1, Version(text.lstrip("=")))
    except InvalidVersion:
        return (0, text)
