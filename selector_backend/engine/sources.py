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
    """Every variant of every configured variant index, with its wheels as the candidate's files.

    A wheel's file carries its wheel-tag finding (one per distinct tag) and
    its order: index order (first index first), then tag preference. Wheels
    that are not variant wheels of this catalog are skipped.
    """
    from selector_backend.engine.resolve import CandidateFile
    from selector_backend.engine.wheel_tags import check_wheel_tags, host_tags
    from selector_backend.engine.wheelname import parse_wheel_name
    from selector_backend.install import variant_index

    ranked_tags = {tag: i for i, tag in enumerate(host_tags(host))}
    verdicts: dict[str, tuple[tuple[Finding, ...], int]] = {}  # one per distinct python-abi-platform tag
    listed = 0  # files of earlier indexes: positions run on across indexes
    new = tuple.__new__  # CandidateFile(...) without its Python-level __new__, once a wheel
    for number, url in enumerate(urls):
        groups = variant_index.read_index_groups(
            url, catalog, allowed_origins=settings.index_file_origins, **settings.fetch_options()
        )
        for group in groups:
            files = []
            for position, filename, link, sha256, tag in group.files:
                verdict = verdicts.get(tag)
                if verdict is None:
                    finding, rank = check_wheel_tags(parse_wheel_name(filename), host, ranked_tags)
                    verdict = verdicts[tag] = ((finding,), rank)
                extra = {"filename": filename, "url": link, "sha256": sha256}
                files.append(new(CandidateFile, (extra, verdict[0], number * 10**9 + verdict[1], listed + position)))
            yield Candidate(group.variant, "index", {"label": group.label, "index": url}, files=tuple(files))
        listed += 1 + max((group.files[-1][0] for group in groups), default=-1)
