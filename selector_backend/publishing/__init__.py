"""Publishing and CI: the wheel matrix, the builder's index, the fleet plan, the variant provider.

For the people who produce the prebuilt variants: ``matrix`` turns the catalog
into cibuildwheel jobs (and the committed GitHub workflow), ``publish`` writes
built wheels into a variant index (what ``install.variant_index`` reads),
``fleet`` picks the fewest variants that serve a fleet of hosts,
``variant_provider`` is the PEP 825 / variantlib plugin for our namespace, and
``provider_dist`` builds it as its own wheel, ``hvd-selector-variant-provider``;
``nccl_companion`` makes the ``[gpu-nvidia]`` companion's sdist, ``hvd-selector-nccl``.
"""

__all__ = ["fleet", "matrix", "nccl_companion", "provider_dist", "publish", "variant_provider"]
