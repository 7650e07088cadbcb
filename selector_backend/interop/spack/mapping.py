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

from selector_backend.engine import targets
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.variant import AxisValue, Variant
from selector_backend.errors import InputError, did_you_mean
from selector_backend.interop.spack.spec import SpackSpec, SpackValue, format_value

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
    return _Translation(spec, catalog, strict).run(catalog_target)


class _Translation:
    """One spec's translation: values so far, and what was assumed or wrong."""

    def __init__(self, spec: SpackSpec, catalog: Catalog, strict: bool) -> None:
        self.spec, self.catalog, self.strict = spec, catalog, strict
        self.where = f"spec {str(spec)!r}"
        self.values: dict[str, AxisValue] = {}
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.carried: list[tuple[str, SpackValue]] = []
        self.cuda_version: str | None = None

    def problem(self, text: str) -> None:
        if self.strict:
            raise InputError(f"{self.where}: {text}")
        self.problems.append(text)

    def run(self, catalog_target: bool) -> Mapped:
        self.other_variants()
        with_cuda = self.cuda()
        for axis_name in VARIANT_AXES:
            self.axis(axis_name, with_cuda)
        self.controllers_for_ops()
        self.target(catalog_target)
        if with_cuda and self.values["cuda"] == CUDA_UNRECORDED and self.strict:
            self.assume_cuda_line()
        ordered = {axis: self.values[axis] for axis in self.catalog.axes}
        if not self.problems:
            for text in self.catalog.violations(Variant(ordered)):
                self.problem(f"not a valid build of this library: {text}")
        return Mapped(ordered, tuple(self.problems), tuple(self.notes), tuple(self.carried), self.cuda_version)

    def other_variants(self) -> None:
        """Variants that are no catalog axis: carried, except +rocm and (strict) unknown names."""
        known = {*VARIANT_AXES, "cuda"}
        for name, value in self.spec.variants:
            if name in known:
                continue
            if name == "rocm" and value in (True, ("true",)):
                self.problem("+rocm: this library has no AMD GPU (ROCm) support")
            elif self.strict and name not in CARRIED_VARIANTS:
                self.problem(
                    f"unknown variant {name!r}{did_you_mean(name, [*known, *CARRIED_VARIANTS])}; "
                    f"catalog variants: cuda, {', '.join(VARIANT_AXES)}; carried: {', '.join(CARRIED_VARIANTS)}"
                )
            self.carried.append((name, value))

    def cuda(self) -> bool:
        """+cuda / ~cuda (or cuda=true/false); the CUDA line from ^cuda@X when recorded."""
        raw = self.spec.variant("cuda")
        if isinstance(raw, tuple):
            if raw[0].lower() in ("true", "false") and len(raw) == 1:
                raw = raw[0].lower() == "true"
            else:
                self.problem(f"cuda={','.join(raw)}: cuda is a boolean variant, write +cuda or ~cuda")
                raw = False
        dep = self.spec.dependency("cuda")
        self.cuda_version = dep.version.lstrip("=") if dep is not None and dep.version else None
        if not raw:
            self.values["cuda"] = "none"
            if self.cuda_version is not None and raw is None:
                self.problem(f"^cuda@{self.cuda_version} without +cuda; write +cuda to build with CUDA")
            return False
        line = _cuda_line(self.cuda_version, self.catalog) if self.cuda_version else None
        if self.cuda_version is not None and line is None:
            lines = ", ".join(f"{n} (toolkit {ln.toolkit})" for n, ln in self.catalog.cuda_lines.items())
            self.problem(f"^cuda@{self.cuda_version} is not a catalog CUDA line; lines: {lines}")
        self.values["cuda"] = line or CUDA_UNRECORDED
        return True

    def axis(self, axis_name: str, with_cuda: bool) -> None:
        """One variant-named axis; unknown values are problems, a missing one the default."""
        axis = self.catalog.axes[axis_name]
        raw = self.spec.variant(axis_name)
        if axis_name == "cuda_arch" and (not with_cuda or raw in (None, ("none",))):
            if not with_cuda and raw not in (None, ("none",)):
                self.problem(f"{format_value(raw, axis_name)} needs +cuda")
            elif with_cuda:
                self.problem("+cuda needs cuda_arch (the GPUs' compute capabilities, e.g. cuda_arch=80)")
            self.values[axis_name] = ("none",)
            return
        if raw is None:
            self.values[axis_name] = axis.default
            default = ",".join(axis.default) if isinstance(axis.default, tuple) else axis.default
            self.notes.append(f"{axis_name} not in the spec: catalog default {default}")
            return
        if isinstance(raw, bool):
            self.problem(
                f"{'+' if raw else '~'}{axis_name}: {axis_name} takes values ({', '.join(axis.values)}), "
                f"write {axis_name}=VALUE"
            )
            self.values[axis_name] = axis.default
            return
        try:
            self.values[axis_name] = self.catalog.parse_value(axis_name, list(raw))
        except InputError as exc:
            self.problem(str(exc))
            good = tuple(v for v in raw if v in axis.values)
            self.values[axis_name] = good if axis.kind == "multi" and good else axis.default

    def controllers_for_ops(self) -> None:
        """Spack's py-horovod builds the tensor_ops library as a controller too."""
        ops, controllers = self.values["tensor_ops"], self.values["controllers"]
        if (
            isinstance(ops, str)
            and ops in _OPS_BUILD_CONTROLLER
            and isinstance(controllers, tuple)
            and ops not in controllers
        ):
            merged = tuple(sorted({*controllers, ops}, key=self.catalog.axes["controllers"].order))
            self.values["controllers"] = merged
            self.notes.append(
                f"tensor_ops={ops} builds {ops} support as well (as Spack's py-horovod does), "
                f"so controllers is {','.join(merged)}"
            )

    def target(self, catalog_target: bool) -> None:
        axis = self.catalog.axes["target"]
        target = self.spec.target
        if target is None:
            target = str(axis.default)
            self.notes.append(f"target not in the spec: catalog default {target}")
        elif not targets.known_target(target):
            self.problem(
                f"target={target} is not an archspec microarchitecture{did_you_mean(target, targets._targets())}"
            )
            target = str(axis.default)
        elif catalog_target and target not in axis.values:
            mapped = catalog_target_for(target, self.catalog)
            if mapped is None:
                self.problem(f"target={target}: no catalog target runs on it; targets: {', '.join(axis.values)}")
            else:
                self.notes.append(f"target={target} is not a catalog target; the nearest one it runs is {mapped}")
                target = mapped
        self.values["target"] = target

    def assume_cuda_line(self) -> None:
        """A spec to build without ^cuda@X: the newest catalog line that builds its archs."""
        archs = self.values["cuda_arch"]
        line = _line_for_archs(archs, self.catalog)
        if line is None:
            self.problem(f"no catalog CUDA line builds cuda_arch {','.join(archs)}")
            return
        self.values["cuda"] = line
        self.notes.append(
            f"the spec has no ^cuda@X: the newest catalog line that builds its archs, "
            f"CUDA {line} (toolkit {self.catalog.cuda_lines[line].toolkit}), is assumed"
        )


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


#: Multi-valued variants printed ``name:=value``: ``name=value`` is a lower bound in Spack
#: (it may add values, e.g. ``controllers=mpi`` becoming ``mpi,gloo``). cuda_arch keeps ``=``:
#: its default is none and CudaPackage's conflicts hold it.
EXACT_VARIANTS = ("controllers", "frameworks")


def gpu_dependencies(variant: Mapping[str, AxisValue]) -> tuple[SpackSpec, ...]:
    """``^nccl cuda_arch=N`` and ``^py-torch cuda_arch=N`` for a CUDA build.

    Spack's py-horovod does not hand its cuda_arch to nccl or py-torch, and a CudaPackage
    with +cuda and no cuda_arch conflicts, so without these the spec does not concretize.
    """
    archs = variant["cuda_arch"] if isinstance(variant["cuda_arch"], tuple) else (str(variant["cuda_arch"]),)
    if str(variant["cuda"]) == "none" or archs == ("none",):
        return ()
    arch = (("cuda_arch", archs),)
    deps = []
    if variant["tensor_ops"] == "nccl":
        deps.append(SpackSpec(name="nccl", variants=arch))
    frameworks = variant["frameworks"]
    if "pytorch" in (frameworks if isinstance(frameworks, tuple) else (str(frameworks),)):
        deps.append(SpackSpec(name="py-torch", variants=arch))
    return tuple(deps)


def variant_to_spec(variant: Mapping[str, AxisValue], package: str, version: str | None) -> SpackSpec:
    """The Spack spec that builds ``variant``: ^cuda@LINE so the driver fits, the GPU
    dependencies' cuda_arch, exact multi-valued variants."""
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
        dependencies=deps + gpu_dependencies(values),
        exact=EXACT_VARIANTS,
    )


def default_version(package: str, catalog: Catalog) -> str | None:
    """Our catalog version for our package, the known release for py-horovod, else none."""
    if package == catalog.spack_package:
        return catalog.version
    return KNOWN_VERSIONS.get(package)
