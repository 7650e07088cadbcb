"""The PEP 517 install path: what ``pip install hvd-selector`` runs.

``backend`` holds the hooks pip calls. It detects the host, resolves against
the configured variant index (``variant_index`` over ``fetch``: configured
origins only, hashes verified, fail closed; ``index_cache`` keeps parsed
pages (``index_groups``) for unchanged page bytes), then either hands pip a verified
prebuilt wheel (``wheelcheck``) or builds exactly the chosen variant from
source (``build``: ``cmake_config`` through scikit-build-core, or the project's own
backend with the target's flags). ``plan_reuse``
shares one decision between pip's hook processes; ``sdist`` and ``metadata``
produce the distribution pip sees; ``origin_record`` adds the install
record to the wheel pip installs (``wheel_members`` adds a member with its RECORD
row; ``import_guard`` the import-time check an adopting project's wheel carries); ``console`` prints what a plain
``pip install`` must show; ``nccl_companion`` is the backend of the ``[gpu-nvidia]``
companion, which declares the NCCL wheel of the build ``backend`` plans.
"""

__all__ = [
    "backend",
    "build",
    "cmake_config",
    "console",
    "fetch",
    "import_guard",
    "index_cache",
    "index_groups",
    "metadata",
    "nccl_companion",
    "origin_record",
    "plan_reuse",
    "sdist",
    "variant_index",
    "wheel_members",
    "wheelcheck",
]
