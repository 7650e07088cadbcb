"""package.py for a project of its own: its catalog's axes as Spack variants, its constraints as conflicts.

hvd-selector's own package (``package_py``) mirrors py-horovod and knows its
libraries; another project's catalog says only its axes, constraints and
build requirements, so its package is simpler: one variant per axis other than
the target (Spack's own ``target`` picks that, the most specific catalog target
the spec's target runs), one conflicts()/requires() per constraint, and a build
that tells the sdist's selector backend the exact variant (always-build,
offline), as hvd-selector's package does. Versions are the published sdists
with their sha256 (``sdists.toml`` beside the package repository).
"""

from __future__ import annotations

from collections.abc import Mapping

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.project import ProjectConfig
from selector_backend.errors import InputError
from selector_backend.interop.spack.package_py import (
    _Call,
    _fmt,
    _value_text,
    class_name,
    constraint_lines,
    targets_most_specific_first,
)
from selector_backend.vendored import import_module

#: Axes whose Spack form is a base class of hvd-selector's package (CudaPackage), not a plain variant.
CUDA_AXES = ("cuda", "cuda_arch")


def spack_dependency(requirement: str) -> str:
    """A PEP 508 build requirement as a Spack spec: setuptools>=61 -> py-setuptools@61:."""
    req = import_module("packaging.requirements").Requirement(requirement)
    name = "py-" + import_module("packaging.utils").canonicalize_name(req.name)
    bounds = {s.operator: s.version for s in req.specifier}
    if "==" in bounds:
        return f"{name}@={bounds['==']}"
    low, high = bounds.get(">="), bounds.get("<=")
    return f"{name}@{low or ''}:{high or ''}" if low or high else name


def variant_axes(catalog: Catalog) -> list[str]:
    """The axes that become Spack variants; a catalog with CUDA axes needs hvd-selector's CudaPackage form."""
    cuda = [a for a in CUDA_AXES if a in catalog.axes]
    if cuda:
        raise InputError(
            f"spack package: {catalog.name}'s catalog has the axis {cuda[0]}, which only hvd-selector's own "
            "package.py (a CudaPackage) writes yet; generate without it or write the CUDA part by hand"
        )
    return [a for a in catalog.axes if a != "target"]


def render_project_package(catalog: Catalog, project: ProjectConfig, sdists: Mapping[str, str]) -> str:
    """The whole package.py for ``catalog``'s project; deterministic."""
    axes = variant_axes(catalog)
    for c in catalog.constraints:
        if "target" in {*c.when, *c.require, *c.include, *c.forbid}:
            raise InputError(
                f"spack package: constraint {c.message!r} names the target, which Spack sets itself "
                "(conflicts on target ranges are not generated); drop it from the constraint or write it by hand"
            )
    pypi_name = catalog.name.replace("-", "_")
    lines = [
        f"# GENERATED from {catalog.path.name} by `hvd-selector spack package`; do not edit.",
        "# ruff: noqa: F405",
        f'"""Spack package for {catalog.name}, built by its selector backend: one catalog variant per spec."""',
        "",
        "import contextlib",
        "",
        "from spack.package import *  # noqa: F403",
        "",
        "# Spack >= 1.0 keeps the build-system base classes in its builtin repository; < 1.0, spack.package",
        "with contextlib.suppress(ImportError):",
        "    from spack_repo.builtin.build_systems.python import PythonPackage",
        "",
        "#: Catalog targets, most specific first: the build's is the first one the spec's target runs.",
        *_fmt(targets_most_specific_first(catalog), 0, "CATALOG_TARGETS = "),
        "#: The catalog axes Spack variants carry, in the catalog's order.",
        *_fmt(tuple(axes), 0, "CATALOG_AXES = "),
        "",
        "",
        "def catalog_variant(runs_on, values):",
        '    """The catalog variant of a concrete spec, as the backend reads it (pure: tests run it without Spack).',
        "",
        "    runs_on(target) says whether code for a catalog target runs on the spec's target",
        "    (Spack: spec.satisfies('target=T:')); values maps each axis to its variant value.",
        '    """',
        "    target = next((t for t in CATALOG_TARGETS if runs_on(t)), None)",
        "    if target is None:",
        '        raise ValueError("no catalog target runs here; catalog targets: " + ", ".join(CATALOG_TARGETS))',
        '    words = [f"target={target}"]',
        "    for axis in CATALOG_AXES:",
        "        value = values[axis]",
        "        words.append(f\"{axis}={value if isinstance(value, str) else ','.join(sorted(value))}\")",
        '    return " ".join(words)',
        "",
        "",
        f"class {class_name(catalog.spack_package)}(PythonPackage):",
        f'    """{catalog.name}, one build per catalog variant (hvd-selector\'s backend in its sdist)."""',
        "",
        f'    pypi = "{catalog.name}/{pypi_name}-{catalog.version}.tar.gz"',
        "",
    ]
    if not sdists:
        lines.append("    # no published sdist in sdists.toml yet: add `VERSION = SHA256` there and regenerate")
    for version in sorted(sdists, key=import_module("packaging.version").parse, reverse=True):
        lines += _fmt(_Call("version", (("", version), ("sha256", sdists[version]))), 4)
    lines.append("")
    for name in axes:
        axis = catalog.axes[name]
        call = _Call(
            "variant",
            (
                ("", name),
                ("default", _value_text(axis.default)),
                ("description", axis.description or f"the catalog's {name} axis"),
                ("values", axis.values),
                ("multi", axis.kind == "multi"),
            ),
        )
        lines += _fmt(call, 4)
    if axes:
        lines.append("")
    lines += [
        '    depends_on("python", type=("build", "run"))',
        '    depends_on("py-pip", type="build")',
    ]
    for requirement in project.build_requires:  # the project's own backend builds in Spack's build environment
        lines += _fmt(_Call("depends_on", (("", spack_dependency(requirement)), ("type", "build"))), 4)
    constraints = constraint_lines(catalog)
    if constraints:
        lines += ["", *constraints]
    lines += [
        "",
        "    def setup_build_environment(self, env):",
        '        """The exact variant for the sdist\'s selector backend: built from source, nothing fetched."""',
        "        spec = self.spec",
        "        values = {axis: spec.variants[axis].value for axis in CATALOG_AXES}",
        '        env.set("HVD_SELECTOR_VARIANT", catalog_variant(lambda t: spec.satisfies(f"target={t}:"), values))',
        '        env.set("HVD_SELECTOR_BUILD_POLICY", "always-build")',
        '        env.set("HVD_SELECTOR_OFFLINE", "1")',
        "",
    ]
    return "\n".join(lines)
