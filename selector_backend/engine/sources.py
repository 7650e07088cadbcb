"""Where candidates come from: the seam between "what exists" and "what fits".

Each source yields ``resolve.Candidate`` values; the resolver does not know
which source it is ranking. The catalog's prebuilt matrix is the default;
a variant index (``install.variant_index.index_candidates``, which reads
files and the network, so it lives on the install side) and Spack listings
(``interop.spack``) plug in the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.resolve import Candidate


def catalog_matrix(catalog: Catalog) -> Iterator[Candidate]:
    """Every variant the catalog says the project publishes."""
    names = {v: e.name for e in catalog.prebuilt for v in e.variants}
    for order, variant in enumerate(catalog.prebuilt_variants()):
        yield Candidate(variant, "catalog", {"matrix_entry": names[variant]}, order=order)
