"""The rules engine: what a variant is, which variants exist, and which one fits a host.

Pure functions over values; it reads no network, runs no subprocess and
detects nothing (a host arrives as a ``HostProfile``, candidates through a
``sources`` object). Every compatibility rule lives here once:

- ``variant``, ``versions``: the values (a variant is one value per catalog axis).
- ``catalog``: a project's catalog (hvd-selector's ``variants/catalog.toml``) as typed, validated data.
- ``project``: the project being served, its ``[tool.hvd-selector]`` table read once (catalog, import name,
  how one variant is built).
- ``host``: ``HostProfile``, everything a resolve may know about a machine.
- ``targets``: CPU targets (archspec ancestry) — ``cpu_verdict``.
- ``compat``: GPU, CUDA driver, library and Python-tag rules.
- ``policy``: the user's selector (auto, cpu, gpu-nvidia, pins).
- ``resolve``: every candidate ranked best first (``RankKey``), with reasons.
- ``select``: the one pipeline entry, ``select(settings, catalog, sources) -> Selection``.
- ``sources``: where candidates come from (the catalog, a variant index).
- ``wheelname``, ``wheel_tags``, ``variant_json``: the wheel formats the rules read.
- ``nccl_pairing``: which NCCL a GPU build pairs with.
- ``runtime``: the one function the installed runtime's import guard calls.
- ``reinstall``: where an installed build came from (its install record) and the repair commands.
"""

__all__ = [
    "catalog",
    "compat",
    "host",
    "nccl_pairing",
    "policy",
    "project",
    "reinstall",
    "resolve",
    "runtime",
    "select",
    "sources",
    "targets",
    "variant",
    "variant_json",
    "versions",
    "wheel_tags",
    "wheelname",
]
