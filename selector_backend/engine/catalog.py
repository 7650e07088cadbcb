"""The variant catalog (variants/catalog.toml) as typed, validated data.

Axes, values, constraints, host requirements, preferences and the prebuilt
matrix are data; this module turns the TOML into frozen objects and rejects a
bad catalog with ``file:line: what is wrong`` before anything uses it.
"""

import functools
import itertools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from selector_backend import PACKAGE_DIR
from selector_backend.engine import targets
from selector_backend.engine.variant import AxisValue, Variant, format_variant
from selector_backend.engine.versions import is_version
from selector_backend.errors import InputError, did_you_mean
from selector_backend.files.tomlfile import TomlDocument, load_toml_remembered

AXIS_KINDS = ("single", "multi")
CAPABILITIES = ("nvidia_gpu", "mpi")
LIBRARIES = ("openssl", "mpi", "nccl")
_TOP_LEVEL = {
    "package",
    "axes",
    "cuda_lines",
    "constraints",
    "host_requirements",
    "libraries",
    "builds",
    "preferences",
    "prebuilt",
}
#: The one axis every catalog has: the CPU target (archspec names), the rule every build obeys. The GPU axes
#: (cuda, cuda_arch) and the communication axes (tensor_ops, controllers) carry engine rules where a catalog
#: has them; a project that varies on the CPU alone leaves them out, and any other axis is the project's own.
REQUIRED_AXES = ("target",)
AXES_IN_PAIRS = {"cuda": "cuda_arch", "cuda_arch": "cuda"}
MPI_ABI_FAMILIES = {"mpich": ("mpich", "intelmpi", "mvapich", "cray-mpich"), "openmpi": ("openmpi",)}


class Axis(NamedTuple):
    name: str
    kind: Literal["single", "multi"]
    values: tuple[str, ...]
    default: AxisValue
    cmake: str
    description: str

    def order(self, value: str) -> int:
        return self.values.index(value)


class CudaLine(NamedTuple):
    name: str
    toolkit: str
    archs: tuple[str, ...]


class Constraint(NamedTuple):
    when: Mapping[str, frozenset[str]]
    require: Mapping[str, frozenset[str]]
    include: Mapping[str, frozenset[str]]
    forbid: Mapping[str, frozenset[str]]
    message: str

    def applies_to(self, variant: Variant) -> bool:
        return all(set(variant.values_of(a)) & vals for a, vals in self.when.items())

    def violated_by(self, variant: Variant) -> bool:
        if not self.applies_to(variant):
            return False
        for axis, allowed in self.require.items():
            if not set(variant.values_of(axis)) <= allowed:
                return True
        for axis, needed in self.include.items():
            if not needed <= set(variant.values_of(axis)):
                return True
        return any(set(variant.values_of(a)) & bad for a, bad in self.forbid.items())


class PrebuiltEntry(NamedTuple):
    name: str
    variants: tuple[Variant, ...]


class Catalog(NamedTuple):
    path: Path
    name: str
    namespace: str
    spack_package: str
    version: str
    axes: Mapping[str, Axis]
    target_family: Mapping[str, str]
    cuda_lines: Mapping[str, CudaLine]
    constraints: tuple[Constraint, ...]
    host_requirements: Mapping[tuple[str, str], tuple[str, ...]]
    preferences: Mapping[str, tuple[str, ...]]
    mpi_abi: str | None = None
    prebuilt: tuple[PrebuiltEntry, ...] = ()
    libraries: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType({})

    # ------------------------------------------------------------ variants
    def axis(self, name: str) -> Axis:
        if name not in self.axes:
            raise InputError(f"unknown axis {name!r}{did_you_mean(name, self.axes)}; axes: {', '.join(self.axes)}")
        return self.axes[name]

    def parse_value(self, axis_name: str, text: str | Iterable[str]) -> AxisValue:
        """Validate one axis value; multi values may be 'a,b' or a list."""
        axis = self.axis(axis_name)
        items = [t.strip() for t in text.split(",")] if isinstance(text, str) else list(text)
        items = [i for i in items if i]
        if not items:
            raise InputError(f"axis {axis.name} needs a value; valid: {', '.join(axis.values)}")
        for item in items:
            if item not in axis.values:
                raise InputError(
                    f"unknown value {item!r} for axis {axis.name}{did_you_mean(item, axis.values)}; "
                    f"valid: {', '.join(axis.values)}"
                )
        if axis.kind == "single":
            if len(items) != 1:
                raise InputError(f"axis {axis.name} takes one value, got {','.join(items)}")
            return items[0]
        return tuple(sorted(set(items), key=axis.order))

    def parse_assignments(self, text: str | Mapping[str, Any]) -> dict[str, AxisValue]:
        """'axis=value axis=v1,v2' (or a mapping) into validated, partial values."""
        if isinstance(text, str):
            pairs: list[tuple[str, Any]] = []
            for token in text.replace(";", " ").split():
                if "=" not in token:
                    raise InputError(f"expected axis=value, got {token!r}")
                key, _, value = token.partition("=")
                pairs.append((key.strip(), value.strip()))
        else:
            pairs = list(text.items())
        out: dict[str, AxisValue] = {}
        for key, value in pairs:
            if key in out:
                raise InputError(f"axis {key} given twice")
            out[key] = self.parse_value(key, value if isinstance(value, (str, list, tuple)) else str(value))
        return out

    def make_variant(self, values: Mapping[str, AxisValue], *, fill_defaults: bool = False) -> Variant:
        """A complete Variant in axis order; missing axes are an error unless defaulted."""
        if values.keys() == self.axes.keys():  # every axis and no other: nothing to fill or name
            return Variant({a: values[a] for a in self.axes})
        missing = [a for a in self.axes if a not in values]
        if missing and not fill_defaults:
            raise InputError(f"variant {format_variant(values)!r} lacks axes: {', '.join(missing)}")
        for key in values:
            self.axis(key)
        return Variant({a: values[a] if a in values else self.axes[a].default for a in self.axes})

    def parse_variant(self, text: str | Mapping[str, Any], *, fill_defaults: bool = False) -> Variant:
        """Parse and check a complete variant against every catalog rule."""
        variant = self.make_variant(self.parse_assignments(text), fill_defaults=fill_defaults)
        self.check(variant)
        return variant

    def violations(self, variant: Variant) -> list[str]:
        """Why ``variant`` cannot be built ([] when it can)."""
        problems = [c.message for c in self.constraints if c.violated_by(variant)]
        cuda = variant.get("cuda")
        if isinstance(cuda, str) and cuda in self.cuda_lines:
            line = self.cuda_lines[cuda]
            bad = [a for a in variant.values_of("cuda_arch") if a not in line.archs and a != "none"]
            if bad:
                problems.append(
                    f"CUDA {cuda} cannot build cuda_arch {','.join(bad)} (it builds {', '.join(line.archs)})"
                )
        return problems

    def check(self, variant: Variant) -> None:
        problems = self.violations(variant)
        if problems:
            raise InputError(f"variant {format_variant(variant)!r} is not buildable: {'; '.join(problems)}")

    def prebuilt_variants(self) -> list[Variant]:
        """Every variant of the prebuilt matrix, de-duplicated, in catalog order."""
        seen: dict[Variant, None] = {}
        for entry in self.prebuilt:
            for v in entry.variants:
                seen.setdefault(v, None)
        return list(seen)

    def requirements_of(self, variant: Variant) -> list[tuple[str, str, str]]:
        """(axis, value, capability) for each host capability the variant needs."""
        needs = []
        for axis in variant:  # in axis order; a partial variant asks about its own axes only
            for value in variant.values_of(axis):
                for cap in self.host_requirements.get((axis, value), ()):
                    needs.append((axis, value, cap))
        return needs

    def libraries_of(self, variant: Variant) -> tuple[str, ...]:
        """The libraries (openssl, mpi, nccl) a variant links: the catalog's [libraries] table, read here only."""
        uses = {
            lib
            for axis in self.axes
            for value in variant.values_of(axis)
            for lib in self.libraries.get((axis, value), ())
        }
        return tuple(lib for lib in LIBRARIES if lib in uses)

    def preference(self, axis: str, value: str) -> int:
        order = self.preferences.get(axis, ())
        return order.index(value) if value in order else len(order)


# ------------------------------------------------------------------ loading
def default_catalog_path() -> Path:
    """The catalog of the project being served (``engine.project``: its ``[tool.hvd-selector]`` catalog)."""
    from selector_backend.engine.project import load_project

    return load_project().catalog_path


def source_checkout() -> Path | None:
    """The repository root when running from a source checkout; None for an installed copy.

    Commands that compare the repository's own files (the CI workflow, the Spack
    package) need a checkout: an installed copy has no such files beside it.
    """
    root = PACKAGE_DIR.parent
    return root if (root / "variants" / "catalog.toml").is_file() and (root / "pyproject.toml").is_file() else None


def require_checkout(what: str, flag: str) -> Path:
    """The checkout root, or one line saying why an installed copy cannot do ``what``."""
    root = source_checkout()
    if root is None:
        where = PACKAGE_DIR.parent
        raise InputError(
            f"{what} compares files of the hvd-selector source repository, and this is an installed copy "
            f"({where}); run it from a checkout (python -m selector_backend ...) or pass {flag}"
        )
    return root


def load_catalog(path: Path | None = None) -> Catalog:
    """Load and validate a catalog (cached per path: it is immutable); None: the served project's, which
    depends on the working directory, so the cache is keyed by the path it names."""
    return _load_catalog(path or default_catalog_path())


@functools.lru_cache(maxsize=8)
def _load_catalog(path: Path) -> Catalog:
    return _CatalogReader(load_toml_remembered(path)).read()


class _CatalogReader:
    """Turns a TomlDocument into a Catalog, pointing errors at file:line."""

    def __init__(self, doc: TomlDocument) -> None:
        self.doc = doc
        self.data = doc.data

    def fail(self, message: str, *needles: str) -> InputError:
        return self.doc.error(message, *needles)

    def table(self, value: Any, what: str, *needles: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{what} must be a table", *needles)
        return value

    def strings(self, value: Any, what: str, *needles: str) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise self.fail(f"{what} must be a string or a non-empty list of strings", *needles)

    def read(self) -> Catalog:
        for key in self.data:
            if key not in _TOP_LEVEL:
                # point at the table header when there is one: the bare word may occur earlier in a string
                header = next((h for h in (f"[{key}]", f"[[{key}]]") if h in self.doc.text), key)
                raise self.fail(f"unknown top-level key {key!r}{did_you_mean(key, _TOP_LEVEL)}", header)
        package = self.table(self.data.get("package"), "[package]", "[package]")
        # the namespace defaults to the import-style name (hvd-selector -> hvd_selector)
        package = {"namespace": re.sub(r"[-.]+", "_", str(package.get("name", ""))).lower(), **package}
        for key in ("name", "namespace", "version"):
            if not isinstance(package.get(key), str):
                raise self.fail(f"[package] needs a string {key!r}", "[package]")
        spack_package = package.get("spack_package", "py-" + str(package["name"]).lower().replace("_", "-"))
        if not isinstance(spack_package, str):
            raise self.fail("[package] spack_package must be a string", "[package]")
        axes = self.read_axes()
        self.axes = axes
        family = self.read_families(axes["target"])
        cuda_lines = self.read_cuda_lines(axes)
        catalog = Catalog(
            path=self.doc.path,
            name=package["name"],
            namespace=package["namespace"],
            spack_package=spack_package,
            version=package["version"],
            axes=axes,
            target_family=family,
            cuda_lines=cuda_lines,
            constraints=self.read_constraints(),
            host_requirements=self.read_value_table("host_requirements", CAPABILITIES, "capability"),
            libraries=self.read_value_table("libraries", LIBRARIES, "library"),
            preferences=self.read_preferences(),
            mpi_abi=self.read_mpi_abi(),
        )
        prebuilt = self.read_prebuilt(catalog)
        catalog = catalog._replace(prebuilt=prebuilt)
        return catalog

    def read_axes(self) -> dict[str, Axis]:
        raw = self.table(self.data.get("axes"), "[axes]", "[axes")
        axes: dict[str, Axis] = {}
        for name in REQUIRED_AXES:
            if name not in raw:
                raise self.fail(f"the catalog must define axis {name!r}", "[axes")
        for name, needs in AXES_IN_PAIRS.items():
            if name in raw and needs not in raw:
                raise self.fail(f"axis {name!r} needs axis {needs!r} too", f"[axes.{name}]")
        for name, spec in raw.items():
            where = f"[axes.{name}]"
            spec = self.table(spec, where, where)
            kind = spec.get("kind", "single")
            if kind not in AXIS_KINDS:
                raise self.fail(f"axis {name}: kind must be single or multi, got {kind!r}", where, "kind")
            values = self.strings(spec.get("values"), f"axis {name}: values", where, "values")
            if len(set(values)) != len(values):
                raise self.fail(f"axis {name}: duplicate values", where, "values")
            first = values[0] if kind == "single" else None  # a single axis defaults to its first value
            default_raw = self.strings(spec.get("default", first), f"axis {name}: default", where, "default")
            defaults = [d for part in default_raw for d in part.split(",")]
            for d in defaults:
                if d not in values:
                    raise self.fail(f"axis {name}: default {d!r} is not one of its values", where, "default")
            if kind == "single" and len(defaults) != 1:
                raise self.fail(f"axis {name}: a single axis has one default", where, "default")
            cmake = spec.get("cmake", "")  # only a CMake build that reads the axes by name needs it
            if not isinstance(cmake, str) or (cmake and not cmake.isidentifier()):
                raise self.fail(f"axis {name}: cmake must name a CMake variable", where, "cmake")
            unknown = set(spec) - {"kind", "values", "default", "cmake", "description", "family"}
            if unknown:
                raise self.fail(f"axis {name}: unknown key {sorted(unknown)[0]!r}", where, sorted(unknown)[0])
            default: AxisValue = defaults[0] if kind == "single" else tuple(sorted(set(defaults), key=values.index))
            axes[name] = Axis(name, kind, values, default, cmake, str(spec.get("description", "")))
        return axes

    def read_families(self, target: Axis) -> dict[str, str]:
        raw = self.data["axes"]["target"].get("family")
        if raw is None:  # archspec's own families
            raw = {}
            for name in target.values:
                if not targets.known_target(name):
                    raise self.fail(f"target {name!r} is not an archspec microarchitecture", "[axes.target]", name)
                raw.setdefault(targets.family(name), []).append(name)
        raw = self.table(raw, "[axes.target.family]", "[axes.target.family]")
        family: dict[str, str] = {}
        for fam, names in raw.items():
            for name in self.strings(names, f"family {fam}", "[axes.target.family]", fam):
                if name not in target.values:
                    raise self.fail(
                        f"family {fam} lists {name!r}, which is not a target value",
                        "[axes.target.family]",
                        fam,
                    )
                if not targets.known_target(name):
                    raise self.fail(f"target {name!r} is not an archspec microarchitecture", "[axes.target]", name)
                actual = targets.family(name)
                if actual != fam:
                    raise self.fail(
                        f"target {name} is an {actual} target (archspec), not {fam}",
                        "[axes.target.family]",
                        fam,
                    )
                family[name] = fam
        for name in target.values:
            if name not in family:
                raise self.fail(f"target {name!r} has no family in [axes.target.family]", "[axes.target]", name)
        return family

    def read_cuda_lines(self, axes: Mapping[str, Axis]) -> dict[str, CudaLine]:
        raw = self.table(self.data.get("cuda_lines", {}), "[cuda_lines]", "[cuda_lines")
        lines: dict[str, CudaLine] = {}
        if "cuda" not in axes:
            if raw:
                raise self.fail("[cuda_lines] needs a cuda axis", "[cuda_lines")
            return lines
        for name, spec in raw.items():
            where = f"[cuda_lines.{name}]"
            spec = self.table(spec, where, where)
            if name not in axes["cuda"].values or name == "none":
                raise self.fail(f"cuda line {name!r} is not a cuda axis value", where)
            toolkit = spec.get("toolkit")
            if not is_version(str(toolkit)):
                raise self.fail(f"cuda line {name}: toolkit {toolkit!r} is not a version", where, "toolkit")
            if not str(toolkit).startswith(f"{name}."):
                raise self.fail(f"cuda line {name}: toolkit {toolkit} is not a CUDA {name}.x", where, "toolkit")
            archs = self.strings(spec.get("archs"), f"cuda line {name}: archs", where, "archs")
            for arch in archs:
                if arch not in axes["cuda_arch"].values or arch == "none":
                    raise self.fail(f"cuda line {name}: arch {arch!r} is not a cuda_arch value", where, arch)
            lines[name] = CudaLine(name, str(toolkit), archs)
        for name in axes["cuda"].values:
            if name != "none" and name not in lines:
                raise self.fail(f"cuda value {name!r} has no [cuda_lines.{name}]", "[axes.cuda]")
        return lines

    def value_sets(self, raw: Any, what: str, *needles: str) -> dict[str, frozenset[str]]:
        out: dict[str, frozenset[str]] = {}
        for axis_name, values in self.table(raw, what, *needles).items():
            if axis_name not in self.axes:
                raise self.fail(
                    f"{what}: unknown axis {axis_name!r}{did_you_mean(axis_name, self.axes)}",
                    *needles,
                    axis_name,
                )
            items = self.strings(values, f"{what}.{axis_name}", *needles, axis_name)
            for item in items:
                if item not in self.axes[axis_name].values:
                    raise self.fail(
                        f"{what}: {item!r} is not a value of {axis_name}"
                        f"{did_you_mean(item, self.axes[axis_name].values)}",
                        *needles,
                        axis_name,
                    )
            out[axis_name] = frozenset(items)
        return out

    def read_constraints(self) -> tuple[Constraint, ...]:
        raw = self.data.get("constraints", [])
        out = []
        for index, spec in enumerate(raw):
            needles = ("[[constraints]]",) * (index + 1)
            spec = self.table(spec, "[[constraints]] entry", *needles)
            unknown = set(spec) - {"when", "require", "include", "forbid", "message"}
            if unknown:
                raise self.fail(f"constraint: unknown key {sorted(unknown)[0]!r}", *needles)
            message = spec.get("message")
            if not isinstance(message, str) or not message:
                raise self.fail("constraint needs a message", *needles)
            parts = {
                k: self.value_sets(spec.get(k, {}), f"constraint {k}", *needles)
                for k in ("when", "require", "include", "forbid")
            }
            constraint = Constraint(message=message, **parts)
            self.check_satisfiable(constraint, needles)
            out.append(constraint)
        return tuple(out)

    def check_satisfiable(self, c: Constraint, needles: tuple[str, ...]) -> None:
        """Reject a rule no variant could ever meet once it applies."""
        for axis in set(c.require) | set(c.forbid) | set(c.include):
            allowed = set(c.require.get(axis, self.axes[axis].values)) - c.forbid.get(axis, frozenset())
            if self.axes[axis].kind == "single" and axis in c.when:
                allowed &= c.when[axis]
            if not allowed or not c.include.get(axis, frozenset()) <= allowed:
                raise self.fail(f"contradictory constraint ({c.message!r}): no value of {axis} satisfies it", *needles)

    def read_value_table(
        self, name: str, allowed: tuple[str, ...], what: str
    ) -> dict[tuple[str, str], tuple[str, ...]]:
        """An ``"axis=value" = [names]`` table ([host_requirements], [libraries])."""
        where = f"[{name}]"
        raw = self.table(self.data.get(name, {}), where, where)
        out: dict[tuple[str, str], tuple[str, ...]] = {}
        for key, names in raw.items():
            axis, _, value = key.partition("=")
            if axis not in self.axes or value not in self.axes[axis].values:
                raise self.fail(f"{name.replace('_', ' ')} key {key!r} is not axis=value", where, key)
            names_t = self.strings(names, f"{what} list {key}", where, key)
            for item in names_t:
                if item not in allowed:
                    raise self.fail(f"unknown {what} {item!r}{did_you_mean(item, allowed)}", where, key)
            out[(axis, value)] = names_t
        return out

    def read_mpi_abi(self) -> str | None:
        builds = self.table(self.data.get("builds", {}), "[builds]", "[builds]")
        unknown = set(builds) - {"mpi_abi"}
        if unknown:
            raise self.fail(f"[builds]: unknown key {sorted(unknown)[0]!r}", "[builds]")
        abi = builds.get("mpi_abi")
        if abi is not None and abi not in MPI_ABI_FAMILIES:
            raise self.fail(
                f"[builds] mpi_abi {abi!r} is unknown{did_you_mean(str(abi), MPI_ABI_FAMILIES)}; "
                f"valid: {', '.join(MPI_ABI_FAMILIES)}",
                "[builds]",
                "mpi_abi",
            )
        return abi

    def read_preferences(self) -> dict[str, tuple[str, ...]]:
        raw = self.data.get("preferences", {})
        sets = self.value_sets(raw, "preferences", "[preferences]")
        return {axis: self.strings(raw[axis], axis) for axis in sets}

    def read_prebuilt(self, catalog: Catalog) -> tuple[PrebuiltEntry, ...]:
        raw = self.data.get("prebuilt", [])
        entries = []
        names: set[str] = set()
        for index, spec in enumerate(raw):
            needles = ("[[prebuilt]]",) * (index + 1)
            spec = self.table(spec, "[[prebuilt]] entry", *needles)
            name = spec.get("name")
            if not isinstance(name, str) or not name:
                raise self.fail("prebuilt entry needs a name", *needles)
            if name in names:
                raise self.fail(f"prebuilt entry name {name!r} is used twice", *needles, "name")
            names.add(name)
            choices: list[list[AxisValue]] = []
            for axis_name in catalog.axes:
                if axis_name not in spec:
                    raise self.fail(f"prebuilt entry {name!r} lacks axis {axis_name}", *needles)
                alts = self.strings(spec[axis_name], f"prebuilt {name}.{axis_name}", *needles, axis_name)
                try:
                    choices.append([catalog.parse_value(axis_name, alt) for alt in alts])
                except InputError as exc:
                    raise self.fail(f"prebuilt entry {name!r}: {exc}", *needles, axis_name) from None
            unknown = set(spec) - set(catalog.axes) - {"name"}
            if unknown:
                key = sorted(unknown)[0]
                raise self.fail(
                    f"prebuilt entry {name!r}: unknown axis {key!r}{did_you_mean(key, catalog.axes)}",
                    *needles,
                    key,
                )
            variants = []
            for combo in itertools.product(*choices):
                variant = Variant(dict(zip(catalog.axes, combo, strict=True)))
                problems = catalog.violations(variant)
                if problems:
                    raise self.fail(
                        f"prebuilt entry {name!r} makes {format_variant(variant)!r}, which is not "
                        f"buildable: {'; '.join(problems)}",
                        *needles,
                    )
                variants.append(variant)
            entries.append(PrebuiltEntry(name, tuple(variants)))
        return tuple(entries)
