"""Spack spec <-> catalog variant: one table of correspondences, both directions.

The catalog axes tensor_ops, controllers, frameworks and cuda_arch are Spack
variants of the same name (as in Spack's py-horovod); ``cuda`` is Spack's
``+cuda``/``~cuda`` plus the CUDA line of the ``^cuda@X`` dependency; the
target is Spack's ``target=``. Variants the catalog does not know
(build_system, commit, patches, ``~rocm`` ...) are carried along untouched;
``+rocm`` is a problem because this library has no AMD GPU support.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import targets
from ..catalog import Catalog
from ..errors import InputError, did_you_mean
from ..variant import AxisValue, Variant
from .spec import SpackSpec, SpackValue, format_value

#: The ``cuda`` value of a ``+cuda`` spec whose CUDA version is not recorded
#: (build-cache listings do not record ``^cuda@``). It is no catalog line, so
#: the engine checks such a binary with toolkit=None (driver check skipped).
CUDA_UNRECORDED = "unrecorded"

#: Catalog axes spelled as Spack variants of the same name.
VARIANT_AXES = ("cuda_arch", "tensor_ops", "controllers", "frameworks")

#: Spack variants that say how, not what, the package builds: carried along by ``spack parse``
#: (a listing carries any variant; a user's spec with another name is more likely a typo).
CARRIED_VARIANTS = ("build_system", "commit", "patches", "dev_path", "rocm", "amdgpu_target")

#: Newest release of packages we know but do not own, for printed specs.
KNOWN_VERSIONS = {"py-horovod": "0.28.1"}

#: tensor_ops values that Spack's py-horovod also builds as a controller
#: (its setup_build_environment sets HOROVOD_WITH_GLOO for tensor_ops=gloo
#: and HOROVOD_WITH_MPI for tensor_ops=mpi, whatever ``controllers`` says).
_OPS_BUILD_CONTROLLER = ("mpi", "gloo")


@dataclass(frozen=True)
class Mapped:
    """What a spec means in catalog terms, and what stops it being a catalog build."""

    values: dict[str, AxisValue]
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    carried: tuple[tuple[str, SpackValue], ...]
    cuda_version: str | None

    def variant(self, catalog: Catalog) -> Variant:
        """The values in catalog axis order (no validation: a listing may hold anything)."""
        return Variant({axis: self.values[axis] for axis in catalog.axes})


def catalog_target_for(target: str, catalog: Catalog) -> str | None:
    """The most specific catalog target a binary for ``target`` contains (Spack's ancestor rule)."""
    runnable = [t for t in catalog.axes["target"].values if targets.runs_on(t, target)]
    if not runnable:
        return None
    return max(runnable, key=lambda t: (targets.specificity(t), -catalog.axes["target"].order(t)))


def _cuda_line(version: str, catalog: Catalog) -> str | None:
    major = version.lstrip("=").split(".")[0].split(":")[0]
    return major if major in catalog.cuda_lines else None


def spec_to_values(spec: SpackSpec, catalog: Catalog, *, strict: bool, catalog_target: bool = False) -> Mapped:
    """Translate ``spec``; ``strict`` raises the first problem as an InputError.

    ``catalog_target`` maps a target the catalog lacks (zen3) to the most
    specific catalog target it runs (x86_64_v3), for a spec that will be
    built; a listing's binary keeps its real target so the CPU rule sees it.
    """
    where = f"spec {str(spec)!r}"
    problems: list[str] = []
    notes: list[str] = []
    carried: list[tuple[str, SpackValue]] = []
    values: dict[str, AxisValue] = {}
    known = set(VARIANT_AXES) | {"cuda"}

    def problem(text: str) -> None:
        if strict:
            raise InputError(f"{where}: {text}")
        problems.append(text)

    for name, value in spec.variants:
        if name == "rocm":
            if value is True or value == ("true",):
                problem("+rocm: this library has no AMD GPU (ROCm) support")
            carried.append((name, value))
        elif name not in known:
            if strict and name not in CARRIED_VARIANTS:
                problem(
                    f"unknown variant {name!r}{did_you_mean(name, [*known, *CARRIED_VARIANTS])}; "
                    f"catalog variants: cuda, {', '.join(VARIANT_AXES)}; carried: {', '.join(CARRIED_VARIANTS)}"
                )
            carried.append((name, value))

    # cuda: +cuda / ~cuda (or cuda=true/false), the line from ^cuda@X
    raw_cuda = spec.variant("cuda")
    if isinstance(raw_cuda, tuple):
        if raw_cuda in (("true",), ("True",)):
            raw_cuda = True
        elif raw_cuda in (("false",), ("False",)):
            raw_cuda = False
        else:
            problem(f"cuda={','.join(raw_cuda)}: cuda is a boolean variant, write +cuda or ~cuda")
            raw_cuda = False
    with_cuda = bool(raw_cuda)
    dep = spec.dependency("cuda")
    cuda_version = dep.version.lstrip("=") if dep is not None and dep.version else None
    if with_cuda:
        if cuda_version is None:
            values["cuda"] = CUDA_UNRECORDED
        else:
            line = _cuda_line(cuda_version, catalog)
            if line is None:
                lines = ", ".join(f"{n} (toolkit {ln.toolkit})" for n, ln in catalog.cuda_lines.items())
                problem(f"^cuda@{cuda_version} is not a catalog CUDA line; lines: {lines}")
                values["cuda"] = CUDA_UNRECORDED
            else:
                values["cuda"] = line
    else:
        values["cuda"] = "none"
        if dep is not None and raw_cuda is None and dep.version:
            problem(f"^cuda@{dep.version} without +cuda; write +cuda to build with CUDA")

    # the variant-named axes
    for axis_name in VARIANT_AXES:
        axis = catalog.axes[axis_name]
        raw = spec.variant(axis_name)
        if axis_name == "cuda_arch":
            if not with_cuda:
                if raw is not None and raw not in (("none",),):
                    problem(f"cuda_arch={format_value(raw, axis_name).partition('=')[2]} needs +cuda")
                values[axis_name] = ("none",)
                continue
            if raw is None or raw == ("none",):
                problem("+cuda needs cuda_arch (the GPUs' compute capabilities, e.g. cuda_arch=80)")
                values[axis_name] = ("none",)
                continue
        if raw is None:
            values[axis_name] = axis.default
            notes.append(
                f"{axis_name} not in the spec: catalog default "
                f"{','.join(axis.default) if isinstance(axis.default, tuple) else axis.default}"
            )
            continue
        if isinstance(raw, bool):
            problem(
                f"{'+' if raw else '~'}{axis_name}: {axis_name} takes values "
                f"({', '.join(axis.values)}), write {axis_name}=VALUE"
            )
            values[axis_name] = axis.default
            continue
        unknown = [v for v in raw if v not in axis.values]
        if unknown:
            try:
                catalog.parse_value(axis_name, list(raw))
            except InputError as exc:
                problem(str(exc))
            good = tuple(v for v in raw if v in axis.values)
            values[axis_name] = good if axis.kind == "multi" and good else axis.default
            continue
        try:
            values[axis_name] = catalog.parse_value(axis_name, list(raw))
        except InputError as exc:
            problem(str(exc))
            values[axis_name] = axis.default

    # Spack's py-horovod builds the tensor_ops library as a controller too
    ops = values["tensor_ops"]
    controllers = values["controllers"]
    if (
        isinstance(ops, str)
        and ops in _OPS_BUILD_CONTROLLER
        and isinstance(controllers, tuple)
        and ops not in controllers
    ):
        order = catalog.axes["controllers"].order
        values["controllers"] = tuple(sorted({*controllers, ops}, key=order))
        notes.append(
            f"tensor_ops={ops} builds {ops} support as well (as Spack's py-horovod does), "
            f"so controllers is {','.join(values['controllers'])}"
        )

    # target
    target = spec.target
    if target is None:
        target = str(catalog.axes["target"].default)
        notes.append(f"target not in the spec: catalog default {target}")
    elif not targets.known_target(target):
        problem(f"target={target} is not an archspec microarchitecture{did_you_mean(target, targets._targets())}")
        target = str(catalog.axes["target"].default)
    elif catalog_target and target not in catalog.axes["target"].values:
        mapped = catalog_target_for(target, catalog)
        if mapped is None:
            problem(
                f"target={target}: no catalog target runs on it; targets: {', '.join(catalog.axes['target'].values)}"
            )
        else:
            notes.append(f"target={target} is not a catalog target; the nearest one it runs is {mapped}")
            target = mapped
    values["target"] = target

    if with_cuda and values["cuda"] == CUDA_UNRECORDED and strict:
        line = _line_for_archs(values["cuda_arch"], catalog)
        if line is None:
            problem(f"no catalog CUDA line builds cuda_arch {','.join(values['cuda_arch'])}")
        else:
            values["cuda"] = line
            notes.append(
                f"the spec has no ^cuda@X: the newest catalog line that builds its archs, "
                f"CUDA {line} (toolkit {catalog.cuda_lines[line].toolkit}), is assumed"
            )

    ordered = {axis: values[axis] for axis in catalog.axes}
    if not problems:
        probe = Variant(ordered)
        for text in catalog.violations(probe):
            if values["cuda"] == CUDA_UNRECORDED and "cuda" in text:
                continue
            problem(f"not a valid build of this library: {text}")
    return Mapped(ordered, tuple(problems), tuple(notes), tuple(carried), cuda_version)


def _line_for_archs(archs: AxisValue, catalog: Catalog) -> str | None:
    wanted = set(archs if isinstance(archs, tuple) else (archs,)) - {"none"}
    order = list(catalog.preferences.get("cuda", ())) + [
        c for c in catalog.cuda_lines if c not in catalog.preferences.get("cuda", ())
    ]
    for name in order:
        line = catalog.cuda_lines.get(name)
        if line is not None and wanted <= set(line.archs):
            return name
    return None


def variant_to_spec(variant: Mapping[str, AxisValue], package: str, version: str | None) -> SpackSpec:
    """The Spack spec that builds ``variant`` (pins ^cuda@LINE so the driver fits)."""
    values = dict(variant)
    cuda = str(values["cuda"])
    spack_variants: list[tuple[str, SpackValue]] = [("cuda", cuda != "none")]
    for axis_name in VARIANT_AXES:
        value = values[axis_name]
        items = value if isinstance(value, tuple) else (str(value),)
        if axis_name == "cuda_arch" and cuda == "none":
            continue
        spack_variants.append((axis_name, items))
    deps = (SpackSpec(name="cuda", version=cuda),) if cuda not in ("none", CUDA_UNRECORDED) else ()
    return SpackSpec(
        name=package,
        version=version or None,
        variants=tuple(spack_variants),
        target=str(values["target"]),
        dependencies=deps,
    )


def default_version(package: str, catalog: Catalog) -> str | None:
    """Our catalog version for our package, the known release for py-horovod, else none."""
    if package == catalog.spack_package:
        return catalog.version
    return KNOWN_VERSIONS.get(package)
