"""``{name}-variant-provider``: a catalog namespace's provider as its own small distribution.

An installer that runs Python providers installs a namespace's provider
before it chooses a wheel. If the provider were ``hvd-selector`` itself, the
package being chosen would have to be installed to choose it. This builds a
pure-Python wheel that carries the provider and a copy of the engine it asks
(``selector_backend``, taken from this tree when the wheel is built and
vendored as the sdist vendors its imports: under a private package name, its
imports rewritten, no ``sys.path`` edit), so it installs
without ``hvd-selector`` and can never disagree with the release it is built
with. Its dependencies are the engine's pure-Python ones. Everything in it
is the catalog's: hvd-selector's gives ``hvd-selector-variant-provider``
(``hvd_selector_variant_provider:HvdSelectorProvider``), another project's
catalog gives ``{name}-variant-provider`` for its own namespace, answering
for its own axes by its own preferences (``variant_json.plugin_api``).
"""

from __future__ import annotations

from pathlib import Path

from selector_backend import PACKAGE_DIR
from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.install.wheel_members import write_wheel

MODULE = variant_json.PLUGIN_API.split(":")[0]  # hvd-selector's
REQUIRES = ("archspec>=0.2.5", "packaging>=22", "tomli>=1.1; python_version < '3.11'")

# The copy's imports of selector_backend are rewritten to its private name as it is copied (the way
# the sdist vendors archspec, packaging and tomli: install.sdist.rewrite_imports), so nobody's
# sys.path is touched and a hvd-selector installed beside the provider is never shadowed or mixed in.
_SHIM = '''"""{name}'s PEP 825 variant provider for the {namespace} namespace (built by hvd-selector's backend).

It carries a copy of the selector engine of its release as {engine}.selector_backend,
its imports rewritten to that name, and the catalog it answers for beside that copy, so it
needs no hvd-selector installed and changes no sys.path.
"""

from {engine}.selector_backend.publishing.variant_provider import HvdSelectorProvider{alias}

__all__ = [{cls!r}]
'''


def _module(catalog: Catalog) -> tuple[str, str]:
    """The provider's (module, class), as every wheel's variant.json names them (``plugin-api``)."""
    module, _, cls = variant_json.plugin_api(catalog).partition(":")
    return module, cls


def wheel_name(catalog: Catalog) -> str:
    return f"{_module(catalog)[0]}-{catalog.version}-py3-none-any.whl"


def provider_files(catalog: Catalog) -> dict[str, bytes]:
    """Archive path -> bytes: the provider module, the engine copy, the catalog and the dist-info."""
    from selector_backend.install.sdist import rewrite_imports

    module, cls = _module(catalog)
    engine_package = f"{module}._engine"  # the copy of selector_backend is {engine_package}.selector_backend
    engine_dir = engine_package.replace(".", "/")
    alias = "" if cls == "HvdSelectorProvider" else f" as {cls}"  # the engine's provider, under the catalog's name
    shim = _SHIM.format(name=catalog.name, namespace=catalog.namespace, engine=engine_package, cls=cls, alias=alias)
    files: dict[str, bytes] = {
        f"{module}/__init__.py": shim.encode(),
        f"{engine_dir}/__init__.py": b'"""The provider\'s copy of selector_backend (see the package docstring)."""\n',
    }
    engine = f"{engine_dir}/selector_backend"
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR)
        if rel.parts[0] in ("_vendor",) or "__pycache__" in rel.parts:
            continue
        files[f"{engine}/{rel.as_posix()}"] = rewrite_imports(path.read_bytes(), ("selector_backend",), engine_package)
    files[f"{engine}/variants/catalog.toml"] = catalog.path.read_bytes()  # the catalog it answers for
    dist_info = f"{module}-{catalog.version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {variant_json.provider_dist(catalog)}",
        f"Version: {catalog.version}",
        f"Summary: PEP 825 variant provider for the {catalog.namespace} namespace of {catalog.name}",
        "License: Apache-2.0",
        "Requires-Python: >=3.10",
        *(f"Requires-Dist: {r}" for r in REQUIRES),
    ]
    files[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: hvd-selector\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{dist_info}/entry_points.txt"] = (
        f"[variant_plugins]\n{catalog.namespace} = {variant_json.plugin_api(catalog)}\n".encode()
    )
    return files


def build_provider_wheel(outdir: Path, catalog: Catalog) -> Path:
    """Write the provider wheel into ``outdir`` (reproducibly: fixed member dates and order); return it."""
    return write_wheel(outdir / wheel_name(catalog), provider_files(catalog))
