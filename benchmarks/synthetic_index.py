"""A large synthetic variant index, generated from the catalog (never committed).

Real indexes grow as releases x variants x Python tags x platforms; this
writes one version with ``variants`` distinct buildable variants, each as a
wheel entry for every tag in ``PYTHON_TAGS``, in the published layout (a PEP
691 project page plus the version's ``-variants.json``, written by the
publisher's own functions). The wheels themselves are not written: resolving
reads only the page and the variants file.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.variant import Variant, variant_label
from selector_backend.publishing import publish

PYTHON_TAGS = ("cp310", "cp311", "cp312", "cp313")


def buildable_variants(catalog: Catalog, limit: int) -> Iterator[Variant]:
    """Distinct buildable variants, CPU ones first, then GPU ones with growing arch lists."""
    axes = catalog.axes
    count = 0
    gpu_archs: list[tuple[str, ...]] = [("none",)]
    for line in catalog.cuda_lines.values():
        archs = list(line.archs)
        for size in (1, 2, 3):
            gpu_archs += [tuple(c) for c in itertools.combinations(archs, size)]
    for archs in gpu_archs:
        for cuda in axes["cuda"].values:
            for target, ops in itertools.product(axes["target"].values, axes["tensor_ops"].values):
                for controllers in (("gloo",), ("mpi",), ("gloo", "mpi")):
                    values = {
                        "target": target,
                        "cuda": cuda,
                        "cuda_arch": archs,
                        "tensor_ops": ops,
                        "controllers": controllers,
                    }
                    variant = catalog.make_variant(values, fill_defaults=True)
                    if catalog.violations(variant):
                        continue
                    yield variant
                    count += 1
                    if count >= limit:
                        return


def write_index(root: Path, catalog: Catalog, variants: int) -> tuple[Path, int]:
    """(the index's simple/ directory, wheel entries written) for ``variants`` distinct variants."""
    chosen = list(buildable_variants(catalog, variants))
    if len(chosen) < variants:
        raise SystemExit(f"the catalog allows only {len(chosen)} buildable variants here (asked for {variants})")
    name = publish.normalize(catalog.name).replace("-", "_")
    files: list[tuple[str, str]] = []
    for variant in chosen:
        label = variant_label(variant)
        for tag in PYTHON_TAGS:
            files.append((f"{name}-{catalog.version}-{tag}-{tag}-manylinux_2_28_x86_64-{label}.whl", "0" * 64))
    variants_name = publish.variants_filename(catalog, catalog.version)
    document = publish.variants_document(chosen, catalog)
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    import hashlib

    files.append((variants_name, hashlib.sha256(text.encode()).hexdigest()))
    project = root / "simple" / publish.normalize(catalog.name)
    project.mkdir(parents=True, exist_ok=True)
    (project / variants_name).write_text(text, encoding="utf-8")
    (project / "index.json").write_text(publish.project_page_json(publish.normalize(catalog.name), files))
    return root / "simple", len(files) - 1
