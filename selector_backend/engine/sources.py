"""Where candidates come from: the seam between "what exists" and "what fits".

Each source yields ``resolve.Candidate`` values; the resolver does not know
which source it is ranking. The catalog's prebuilt matrix is the default;
the variant index and wheelhouse sources (``variant_index``), and Spack
listings (``selector_backend.interop.spack``) plug in the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.resolve import Candidate

if TYPE_CHECKING:
    from selector_backend.settings import Settings


def catalog_matrix(catalog: Catalog) -> Iterator[Candidate]:
    """Every variant the catalog says the project publishes."""
    names = {v: e.name for e in catalog.prebuilt for v in e.variants}
    for order, variant in enumerate(catalog.prebuilt_variants()):
        yield Candidate(variant, "catalog", {"matrix_entry": names[variant]}, order=order)


def index_candidates(
    urls: Iterable[str], catalog: Catalog, host: HostProfile, settings: Settings
) -> Iterator[Candidate]:
    """Every wheel of every configured variant index, with its wheel-tag finding.

    Candidates keep index order (first index first) as the final tie-break;
    wheels that are not variant wheels of this catalog are skipped.
    """
    from selector_backend.engine.wheel_tags import check_wheel_tags, host_tags
    from selector_backend.install import variant_index

    ranked_tags = {tag: i for i, tag in enumerate(host_tags(host))}
    verdicts: dict[tuple[str, str, str], tuple[Finding, int]] = {}  # one per distinct tag triple
    for position, url in enumerate(urls):
        entries = variant_index.read_index(
            url, catalog, allowed_origins=settings.index_file_origins, **settings.fetch_options()
        )
        for entry in entries:
            triple = (entry.wheel.python, entry.wheel.abi, entry.wheel.platform)
            verdict = verdicts.get(triple)
            if verdict is None:
                verdict = verdicts[triple] = check_wheel_tags(entry.wheel, host, ranked_tags)
            finding, tag_rank = verdict
            extra = {
                "filename": entry.filename,
                "url": entry.url,
                "sha256": entry.sha256,
                "label": entry.label,
                "index": url,
            }
            yield Candidate(entry.variant, "index", extra, (finding,), order=position * 10**9 + tag_rank)
