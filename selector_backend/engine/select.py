"""The one pipeline: settings + catalog + sources -> a Selection.

Every consumer that asks "what should this host get" goes through here: the
PEP 517 backend, the CLI (resolve, doctor, spack, horovod-env), the Spack
picker and the fleet planner. The order is fixed so bad input fails before
anything slow runs: the requested variant and the selector's pins are read
(here, and nowhere else), then the host is obtained, then the candidates,
then ``resolve`` ranks them.

The engine does no I/O: ``Sources`` carries the caller's functions that
detect or load the host and read candidates (the catalog's matrix, a
variant index read by ``install.variant_index``, a Spack listing).
"""

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import Selector, parse_selector
from selector_backend.engine.resolve import Candidate, Ranked, Resolution, resolve
from selector_backend.engine.variant import Variant

if TYPE_CHECKING:
    from selector_backend.settings import Settings


class Sources(NamedTuple):
    """What ``select`` needs from outside the engine, as functions the caller supplies."""

    host: Callable[[], HostProfile]
    """detect this machine, or load --host-profile, then apply overrides (detect.host_profile_for)"""
    candidates: Callable[[HostProfile], Iterable[Candidate]] | None = None
    """what could be installed on that host; None ranks nothing (only the source build is wanted)"""

    @classmethod
    def fixed(cls, host: HostProfile, candidates: Iterable[Candidate] | None = None) -> "Sources":
        """A host and candidates already in hand (the planner, the Spack picker, tests)."""
        listed = None if candidates is None else list(candidates)
        return cls(lambda: host, None if listed is None else (lambda _host: listed))


class Selection(NamedTuple):
    """The host, every candidate ranked, the chosen one and the source-build spec."""

    host: HostProfile
    resolution: Resolution
    requested: Variant | None = None  # the ``variant`` setting: build exactly this from source
    requested_by: str | None = None  # where that setting came from

    @property
    def selector(self) -> Selector:
        return self.resolution.selector

    @property
    def candidates(self) -> tuple[Ranked, ...]:
        return self.resolution.candidates

    @property
    def chosen(self) -> Ranked | None:
        """The best compatible candidate, or None when nothing ranked fits."""
        return self.resolution.selected

    @property
    def source_build(self) -> Variant | None:
        """What a source build targets: the requested variant, else the exact build for this host."""
        return self.requested if self.requested is not None else self.resolution.source_build

    def require_source_build(self) -> Variant:
        """``source_build``, or the error that says why no source build fits this host."""
        if self.source_build is not None:
            return self.source_build
        assert self.resolution.source_build_error is not None  # resolve() keeps one or the other
        raise self.resolution.source_build_error


def select(settings: "Settings", catalog: Catalog, sources: Sources) -> Selection:
    """Read the request out of ``settings`` (variant, selector pins), then ``select_with``."""
    requested = catalog.parse_variant(settings.variant, fill_defaults=True) if settings.variant else None
    selection = select_with(parse_selector(settings.selector, catalog), catalog, sources)
    if requested is None:
        return selection
    return selection._replace(requested=requested, requested_by=settings.origins.get("variant", "variant"))


def select_with(selector: Selector, catalog: Catalog, sources: Sources) -> Selection:
    """The pipeline for a selector already parsed: host, candidates, ranking."""
    host = sources.host()
    candidates = () if sources.candidates is None else sources.candidates(host)
    return Selection(host, resolve(host, candidates, catalog, selector))
