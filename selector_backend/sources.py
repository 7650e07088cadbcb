"""Where candidates come from: the seam between "what exists" and "what fits".

Each source yields ``resolve.Candidate`` values; the resolver does not know
which source it is ranking. The catalog's prebuilt matrix is the default;
the variant index and wheelhouse sources (``variant_index``), and Spack
listings (``selector_backend.spack``) plug in the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

from .catalog import Catalog
from .resolve import Candidate


def catalog_matrix(catalog: Catalog) -> Iterator[Candidate]:
    """Every variant the catalog says the project publishes."""
    names = {v: e.name for e in catalog.prebuilt for v in e.variants}
    for order, variant in enumerate(catalog.prebuilt_variants()):
        yield Candidate(variant, "catalog", {"matrix_entry": names[variant]}, order=order)
