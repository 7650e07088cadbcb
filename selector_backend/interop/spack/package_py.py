"""spack/packages/<spack_package>/package.py: generated from the catalog, checked against it.

``render_package`` writes the file (``hvd-selector spack package --write``);
``check_package`` reads a file back with ``ast`` (no Spack needed) and lists
every way it disagrees with the catalog: variants, values, defaults, the
constraints as conflicts()/requires(), the CUDA lines, and the tables its
build uses to compute the CMake options. The variant names and semantics
mirror Spack's py-horovod (frameworks, controllers, tensor_ops, CudaPackage's
cuda/cuda_arch) so a Spack user reads them the same way.
"""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from packaging.version import parse as parse_version

from selector_backend.engine import targets
from selector_backend.engine.catalog import Catalog
from selector_backend.errors import InputError
from selector_backend.files import safeparse
from selector_backend.files.tomlfile import load_toml

#: Spack variants that are catalog axes of the same name (cuda/cuda_arch are CudaPackage's).
PLAIN_VARIANTS = ("frameworks", "controllers", "tensor_ops")

#: Where Spack fetches the source: the project's git repository (the ``main`` branch, and a
#: ``v<version>`` tag for a catalog version whose sdist is not published yet). The name is the
#: distribution's; the sdists in spack/sdists.toml come from PyPI with their sha256.
GIT_URL = "https://github.com/hvd-selector/hvd-selector.git"
HOMEPAGE = "https://github.com/hvd-selector/hvd-selector"

#: Lower bounds the build needs (CMakeLists.txt, native/nccl, pyproject's build requires).
NCCL_MIN = "2.19"
NANOBIND_MIN = "2.2"  # FREE_THREADED

#: The Spack releases the generated package.py is written for (installed with 1.1.0,
#: docs/guide/spack.md): 1.0 moved the build-system base classes to the spack_repo.builtin
#: repository (imported either way, so 0.23, with language dependencies, still loads it).
SUPPORTED_SPACK = "1.0 and later"


class Directive(NamedTuple):
    """One conflicts()/requires() call: kind, spec, when, msg."""

    kind: str
    spec: str
    when: str
    msg: str


def class_name(package: str) -> str:
    """Spack's rule: py-hvd-selector -> PyHvdSelector."""
    return "".join(part.capitalize() for part in package.replace("_", "-").split("-"))


def package_path(catalog: Catalog, repo: Path | None = None) -> Path:
    root = repo if repo is not None else catalog.path.parent.parent / "spack"
    return root / "packages" / catalog.spack_package / "package.py"


def targets_most_specific_first(catalog: Catalog) -> tuple[str, ...]:
    values = catalog.axes["target"].values
    return tuple(sorted(values, key=lambda t: (-targets.specificity(t), values.index(t))))


def _condition(axis: str, value: str) -> str:
    if axis == "cuda":
        return "~cuda" if value == "none" else "+cuda"
    return f"{axis}={value}"


def constraint_directives(catalog: Catalog) -> list[Directive]:
    """The catalog's constraints as Spack directives.

    cuda=none requiring cuda_arch=none needs no directive: CudaPackage only
    defines cuda_arch when +cuda. A constraint of another shape is an error,
    so a catalog change the package cannot express fails loudly.
    """
    out: list[Directive] = []
    for c in catalog.constraints:
        if len(c.when) != 1:
            raise InputError(f"constraint {c.message!r}: package.py supports one 'when' axis")
        ((w_axis, w_values),) = c.when.items()
        whens = sorted({_condition(w_axis, v) for v in w_values})
        if len(whens) != 1:
            raise InputError(f"constraint {c.message!r}: 'when' must map to one Spack condition")
        when = whens[0]
        for axis, allowed in c.require.items():
            if w_axis == "cuda" and when == "~cuda" and axis == "cuda_arch" and allowed == {"none"}:
                continue  # implied: cuda_arch exists only when +cuda
            for value in catalog.axes[axis].values:
                if value not in allowed:
                    out.append(Directive("conflicts", _condition(axis, value), when, c.message))
        for axis, bad in c.forbid.items():
            for value in sorted(bad, key=catalog.axes[axis].values.index):
                spec = _condition(axis, value)
                if spec == when:
                    raise InputError(f"constraint {c.message!r} forbids its own condition")
                # conflicts(A, when=B) is conflicts(B, when=A); keep +cuda/~cuda in when, as py-horovod
                pair = (when, spec) if axis == "cuda" else (spec, when)
                out.append(Directive("conflicts", *pair, c.message))
        for axis, needed in c.include.items():
            for value in sorted(needed, key=catalog.axes[axis].values.index):
                out.append(Directive("requires", _condition(axis, value), when, c.message))
    return out


def constraint_lines(catalog: Catalog) -> list[str]:
    """The catalog's constraints as the class body's directive lines (hvd-selector's package and any project's)."""
    lines: list[str] = []
    for d in constraint_directives(catalog):
        lines += _fmt(_Call(d.kind, (("", d.spec), ("when", d.when), ("msg", d.msg))), 4)
    return lines


def line_directives(catalog: Catalog, known_archs: tuple[str, ...]) -> list[Directive]:
    """The archs each CUDA line cannot build, among those a Spack's CudaPackage knows.

    package.py computes these in a loop over CudaPackage.cuda_arch_values: a
    directive naming an arch that Spack version lacks (100 in Spack 0.23) is an
    error there, so only the known ones can be written.
    """
    out = []
    for arch in known_archs:
        for name, line in catalog.cuda_lines.items():
            if arch in catalog.axes["cuda_arch"].values and arch != "none" and arch not in line.archs:
                msg = f"CUDA {name} cannot build cuda_arch {arch}"
                out.append(Directive("conflicts", f"cuda_arch={arch}", f"^cuda@{name}", msg))
    return out


def cuda_dependency(catalog: Catalog) -> str:
    """cuda@12.4:12,13.0:13 - each catalog line from its toolkit up to the next major."""
    ranges = [f"{line.toolkit}:{name}" for name, line in catalog.cuda_lines.items()]
    return "cuda@" + ",".join(ranges)


LINE_LENGTH = 120  # pyproject [tool.ruff] line-length: the file stays ruff-format clean


def _one_line(value: Any) -> str:
    """A Python literal in ruff's style: double quotes, (x,) for one-tuples."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, _Call):
        raise TypeError(value)
    if isinstance(value, tuple):
        inner = ", ".join(_one_line(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_one_line(k)}: {_one_line(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _items(value: Any) -> tuple[str, str, list[tuple[str, Any]]]:
    if isinstance(value, _Call):
        return f"{value.name}(", ")", [(f"{k}=" if k else "", v) for k, v in value.args]
    if isinstance(value, tuple):
        return "(", ")", [("", v) for v in value]
    if isinstance(value, dict):
        return "{", "}", [(f"{_one_line(k)}: ", v) for k, v in value.items()]
    raise TypeError(value)


class _Call(NamedTuple):
    name: str
    args: tuple[tuple[str, Any], ...]


def _flat_call(call: _Call) -> str:
    def one(v: Any) -> str:
        return _flat_call(v) if isinstance(v, _Call) else _one_line(v)

    return f"{call.name}(" + ", ".join(f"{k}={one(v)}" if k else one(v) for k, v in call.args) + ")"


def _fmt(value: Any, indent: int, prefix: str = "", suffix: str = "") -> list[str]:
    """Lay out ``prefix + value + suffix`` at ``indent`` the way ruff format does."""
    pad = " " * indent
    if isinstance(value, _Call):
        flat = _flat_call(value)
    elif isinstance(value, (tuple, dict)):
        flat = _one_line(value)
    else:
        return [f"{pad}{prefix}{_one_line(value)}{suffix}"]
    if indent + len(prefix) + len(flat) + len(suffix) <= LINE_LENGTH:
        return [f"{pad}{prefix}{flat}{suffix}"]
    opener, closer, items = _items(value)
    inner = " " * (indent + 4)
    if items and not (isinstance(value, tuple) and len(items) == 1):
        hug = flat[len(opener) : -len(closer)]
        if (
            len(inner) + len(hug) <= LINE_LENGTH
            and not isinstance(value, dict)
            and len(items) > 1
            and all(not isinstance(v, (tuple, dict, _Call)) for _, v in items)
        ):
            return [f"{pad}{prefix}{opener}", f"{inner}{hug}", f"{pad}{closer}{suffix}"]
    lines = [f"{pad}{prefix}{opener}"]
    for key, item in items:
        lines += _fmt(item, indent + 4, key, ",")
    lines.append(f"{pad}{closer}{suffix}")
    return lines


def _value_text(value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def sdists_path(catalog: Catalog, repo: Path | None = None) -> Path:
    """The sdists.toml beside the package repository ``repo``; where ``repo`` has none (a
    site's own repository), the project's spack/sdists.toml, so its published versions stay."""
    project = catalog.path.parent.parent / "spack" / "sdists.toml"
    if repo is not None and (repo / "sdists.toml").is_file():
        return repo / "sdists.toml"
    return project


def load_sdists(path: Path) -> dict[str, str]:
    """version -> sha256 of each published sdist; a missing file means none is published."""
    if not path.is_file():
        return {}
    table = load_toml(path).data.get("sdists", {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: [sdists] must be a table of version = sha256")
    for version, sha in table.items():
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise InputError(f"{path}: sdist {version}: {sha!r} is not a lowercase hex sha256")
    return dict(table)


def version_calls(catalog: Catalog, sdists: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    """main from git, then every published sdist with its sha256, newest first; the catalog's
    own version as a git tag until its sdist is published."""
    calls: list[tuple[str, dict[str, str]]] = [("main", {"branch": "main"})]
    published = dict(sdists)
    if catalog.version not in published:
        calls.append((catalog.version, {"tag": f"v{catalog.version}"}))
    for version in sorted(published, key=parse_version, reverse=True):
        calls.append((version, {"sha256": published[version]}))
    return calls


# ------------------------------------------------------------------ render
def render_package(catalog: Catalog, sdists: Mapping[str, str] | None = None) -> str:
    """The whole package.py; deterministic, so a test can compare it byte for byte.

    ``sdists`` (version -> sha256) defaults to the project's spack/sdists.toml.
    """
    axes = catalog.axes
    cls = class_name(catalog.spack_package)
    order = {a: axes[a].values for a in ("cuda_arch", "controllers", "frameworks")}
    lines = [
        "# Copyright hvd-selector developers. SPDX-License-Identifier: Apache-2.0",
        "#",
        "# GENERATED from variants/catalog.toml by `hvd-selector spack package --write`;",
        "# do not edit. tests/spack/test_spack_package_py.py fails when the two disagree.",
        "# ruff: noqa: F405",
        f"# For Spack {SUPPORTED_SPACK} (docs/guide/spack.md).",
        '"""Spack package for hvd-selector, the Horovod-style collective library."""',
        "",
        "from spack.package import *  # noqa: F403",
        "",
        "try:  # Spack >= 1.0 keeps the build-system base classes in its builtin repository",
        "    from spack_repo.builtin.build_systems.cuda import CudaPackage",
        "    from spack_repo.builtin.build_systems.python import PythonPackage",
        "except ImportError:  # Spack < 1.0 exports them from spack.package",
        "    pass",
        "",
        "#: Catalog targets, most specific first: HVD_TARGET is the first one the spec's target runs.",
        *_fmt(targets_most_specific_first(catalog), 0, "HVD_TARGETS = "),
        "#: Value order of the multi-valued axes (the CMake value joins them in this order).",
        *_fmt(order, 0, "HVD_VALUE_ORDER = "),
        "#: What each catalog CUDA line (the ^cuda major) can build.",
        *_fmt({n: ln.archs for n, ln in catalog.cuda_lines.items()}, 0, "HVD_CUDA_LINES = "),
        "",
        "",
        "def hvd_values(runs_on, cuda_major, tensor_ops, controllers, frameworks, cuda_arch):",
        '    """Catalog axis values of a concrete spec (pure, so tests run it without Spack).',
        "",
        "    runs_on(target) says whether a binary for a catalog target runs on the spec's",
        "    target (Spack: spec.satisfies('target=T:')); cuda_major is None for ~cuda.",
        '    """',
        "    target = next((t for t in HVD_TARGETS if runs_on(t)), None)",
        "    if target is None:",
        '        raise ValueError("no catalog target runs on this spec\'s target; targets: " + ", ".join(HVD_TARGETS))',
        "",
        "    def ordered(axis, values):",
        "        return tuple(sorted(set(values), key=HVD_VALUE_ORDER[axis].index))",
        "",
        "    return {",
        '        "target": target,',
        '        "cuda": str(cuda_major) if cuda_major is not None else "none",',
        '        "cuda_arch": ordered("cuda_arch", cuda_arch) if cuda_major is not None else ("none",),',
        '        "tensor_ops": tensor_ops,',
        '        "controllers": ordered("controllers", controllers),',
        '        "frameworks": ordered("frameworks", frameworks),',
        "    }",
        "",
        "",
        "def hvd_libraries(values):",
        '    """The Spack dependencies whose prefixes the build of these values needs, in a fixed order."""',
        '    uses = {values["tensor_ops"], *values["controllers"]}',
        '    libraries = ["openssl"] if "gloo" in values["controllers"] else []',
        '    libraries += [name for name in ("mpi", "nccl") if name in uses]',
        '    return libraries + (["cuda"] if values["cuda"] != "none" else [])',
        "",
        "",
        "def hvd_dependency_settings(values, prefixes, mpicc, cmake):",
        '    """Environment and -D definitions that point the build at the dependencies Spack built.',
        "",
        "    prefixes maps each of hvd_libraries(values) to its install prefix, mpicc is the MPI's",
        "    compiler wrapper (None without MPI), cmake Spack's cmake. CMAKE_PREFIX_PATH finds the",
        "    libraries (CMake and the backend's toolchain check), link-path RPATHs keep them found at",
        "    run time, and CMAKE_EXECUTABLE stops scikit-build-core preferring a cmake module of the",
        "    Python prefix. Returns (variables to set, CMAKE_PREFIX_PATH entries, definitions).",
        '    """',
        "    libraries = hvd_libraries(values)",
        '    env = {"CMAKE_EXECUTABLE": cmake}',
        '    defines = {"CMAKE_INSTALL_RPATH_USE_LINK_PATH": "ON"}',
        '    if "mpi" in libraries:',
        '        env["MPICC"] = mpicc',
        '        defines["MPI_C_COMPILER"] = mpicc',
        '    if "nccl" in libraries:',
        '        env["HVD_NCCL_HOME"] = prefixes["nccl"]',
        '    if "cuda" in libraries:',
        '        env["CUDACXX"] = prefixes["cuda"] + "/bin/nvcc"',
        '        env["CUDAToolkit_ROOT"] = prefixes["cuda"]',
        "    return env, [prefixes[name] for name in libraries], defines",
        "",
        "",
        f"class {cls}(PythonPackage, CudaPackage):",
        '    """Horovod-style collectives (allreduce, allgather, broadcast) over TCP, MPI and NCCL.',
        "",
        "    The build is an exact source build of one catalog variant: the selector backend is",
        "    told the variant (HVD_SELECTOR_VARIANT, build policy always-build, offline) and",
        "    hands CMake its build description, as for its own source builds; CMake gets only",
        "    where Spack put the libraries.",
        f"    Build from a checkout: spack develop --path /path/to/checkout {catalog.spack_package}@={catalog.version}",
        '    """',
        "",
        f'    homepage = "{HOMEPAGE}"',
        f'    pypi = "{catalog.name}/{catalog.name.replace("-", "_")}-{catalog.version}.tar.gz"',
        f'    git = "{GIT_URL}"',
        "",
        '    license("Apache-2.0")',
        "",
        "    # main from git; published sdists with their sha256 (spack/sdists.toml); the catalog",
        "    # version as its git tag until its sdist is published",
    ]
    published = sdists if sdists is not None else load_sdists(sdists_path(catalog))
    for version, kwargs in version_calls(catalog, published):
        lines += _fmt(_Call("version", (("", version), *kwargs.items())), 4)
    lines += [
        "",
    ]
    for name in reversed(PLAIN_VARIANTS):
        axis = axes[name]
        call = _Call(
            "variant",
            (
                ("", name),
                ("default", _value_text(axis.default)),
                ("description", axis.description),
                ("values", axis.values),
                ("multi", axis.kind == "multi"),
            ),
        )
        lines += _fmt(call, 4)
    lines += [
        "    # cuda and cuda_arch are CudaPackage's: refuse the archs the catalog does not build, and",
        "    # per CUDA line the archs it cannot build; NCCL and PyTorch for the same archs (a loop:",
        "    # Spack versions know different archs)",
        "    for _arch in CudaPackage.cuda_arch_values:",
        '        if _arch not in HVD_VALUE_ORDER["cuda_arch"]:',
        '            conflicts(f"cuda_arch={_arch}", msg="not a cuda_arch of the hvd-selector catalog")',
        "            continue",
        '        depends_on(f"nccl+cuda cuda_arch={_arch}", when=f"tensor_ops=nccl cuda_arch={_arch}")',
        '        depends_on(f"py-torch+cuda cuda_arch={_arch}", when=f"frameworks=pytorch cuda_arch={_arch}")',
        "        for _line, _line_archs in HVD_CUDA_LINES.items():",
        "            if _arch not in _line_archs:",
        '                msg = f"CUDA {_line} cannot build cuda_arch {_arch}"',
        '                conflicts(f"cuda_arch={_arch}", when=f"^cuda@{_line}", msg=msg)',
    ]
    lines += [
        "",
        '    depends_on("c", type="build")',
        '    depends_on("cxx", type="build")',
        '    depends_on("python@3.10:", type=("build", "run"))',
        '    depends_on("cmake@3.24:", type="build")',
        "    # 0.10: CMAKE_EXECUTABLE picks Spack's cmake over a cmake module in the Python prefix",
        '    depends_on("py-scikit-build-core@0.10:", type="build")',
        f'    depends_on("py-nanobind@{NANOBIND_MIN}:", type="build")',
        "    # the backend computes the build description (archspec flags) before CMake runs",
        '    depends_on("py-packaging@22:", type=("build", "run"))',
        '    depends_on("py-archspec@0.2.5:", type=("build", "run"))',
        "    # selector_backend reads TOML with tomllib, or tomli before Python 3.11",
        '    depends_on("py-tomli", type=("build", "run"), when="^python@:3.10")',
        '    depends_on("py-numpy@1.23:", type=("build", "run"))',
        '    depends_on("py-nvidia-ml-py", type="run")',
        '    depends_on("py-torch", type="run", when="frameworks=pytorch")',
        '    depends_on("mpi", when="controllers=mpi")',
        '    depends_on("mpi", when="tensor_ops=mpi")',
        "    # the gloo controller's data plane is the core's own TCP mesh, authenticated with",
        "    # HMAC-SHA256 from libcrypto; it links no Gloo, so any py-torch+gloo can sit beside it",
        '    depends_on("openssl", when="controllers=gloo")',
        '    depends_on("openssl", when="tensor_ops=gloo")',
        f'    depends_on("nccl@{NCCL_MIN}:", when="tensor_ops=nccl")',
        f'    depends_on("{cuda_dependency(catalog)}", when="+cuda")',
        "",
    ]
    lines += constraint_lines(catalog)
    lines += [
        "",
        "    def hvd_variant(self):",
        '        """This spec as catalog axis values."""',
        "        spec = self.spec",
        '        cuda = spec.satisfies("+cuda")',
        "        return hvd_values(",
        '            lambda t: spec.satisfies(f"target={t}:"),',
        '            spec["cuda"].version.up_to(1) if cuda else None,',
        '            spec.variants["tensor_ops"].value,',
        '            spec.variants["controllers"].value,',
        '            spec.variants["frameworks"].value,',
        '            spec.variants["cuda_arch"].value if cuda else (),',
        "        )",
        "",
        "    def setup_build_environment(self, env):",
        '        """The variant for the backend, and for CMake where Spack put each library it links."""',
        "        values = self.hvd_variant()",
        '        text = " ".join(f"{a}={v if isinstance(v, str) else \',\'.join(v)}" for a, v in values.items())',
        '        env.set("HVD_SELECTOR_VARIANT", text)',
        '        env.set("HVD_SELECTOR_BUILD_POLICY", "always-build")',
        '        env.set("HVD_SELECTOR_OFFLINE", "1")',
        "        libraries = hvd_libraries(values)",
        "        prefixes = {name: str(self.spec[name].prefix) for name in libraries}",
        "        mpicc = None",
        '        if "mpi" in libraries:',
        '            mpicc = getattr(self.spec["mpi"], "mpicc", None) or prefixes["mpi"] + "/bin/mpicc"',
        '        cmake = str(self.spec["cmake"].prefix.bin.cmake)',
        "        variables, prefix_path, dependency_defines = hvd_dependency_settings(values, prefixes, mpicc, cmake)",
        "        for key, value in variables.items():",
        "            env.set(key, value)",
        "        for prefix in reversed(prefix_path):",
        '            env.prepend_path("CMAKE_PREFIX_PATH", prefix)',
        '        env.set("SKBUILD_CMAKE_DEFINE", ";".join(f"{k}={v}" for k, v in dependency_defines.items()))',
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ check
class _Read(NamedTuple):
    constants: dict[str, Any]
    cls: str | None
    bases: tuple[str, ...]
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]
    attributes: dict[str, Any]


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "any_combination_of":
        return ("any_combination_of", tuple(ast.literal_eval(a) for a in node.args))
    return ast.literal_eval(node)


def read_package(path: Path) -> _Read:
    """Module constants and the class body's directive calls, without importing Spack."""
    text = safeparse.read_text(path, "package.py")  # a regular file, bounded (a FIFO there would hang)
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid Python ({exc.msg})") from None
    constants: dict[str, Any] = {}
    cls = None
    bases: tuple[str, ...] = ()
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    attributes: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                constants[node.targets[0].id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.ClassDef):
            cls = node.name
            bases = tuple(b.id for b in node.bases if isinstance(b, ast.Name))
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    with contextlib.suppress(ValueError):
                        attributes[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name)
                ):
                    call, name = stmt.value, stmt.value.func.id
                    try:
                        args = tuple(_literal(a) for a in call.args)
                        kwargs = {k.arg: _literal(k.value) for k in call.keywords if k.arg}
                    except ValueError:
                        raise InputError(f"{path}:{call.lineno}: {name}() arguments must be literals") from None
                    calls.append((name, args, kwargs))
    return _Read(constants, cls, bases, calls, attributes)


def _restricts_cuda_arch(path: Path) -> bool:
    """The class body loops over CudaPackage.cuda_arch_values adding conflicts for non-catalog archs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.For)
            and isinstance(node.iter, ast.Attribute)
            and node.iter.attr == "cuda_arch_values"
            and isinstance(node.iter.value, ast.Name)
            and node.iter.value.id == "CudaPackage"
        ):
            body = ast.dump(ast.Module(body=node.body, type_ignores=[]))
            words = ("conflicts", "depends_on", "nccl+cuda", "HVD_VALUE_ORDER", "HVD_CUDA_LINES", "NotIn")
            return all(word in body for word in words)
    return False


def _source_problems(read: _Read, catalog: Catalog, sdists: Mapping[str, str]) -> list[str]:
    """A fetchable source: the git repository, main, the catalog version, every published sdist."""
    problems = []
    if read.attributes.get("git") != GIT_URL:
        problems.append(f"git = {read.attributes.get('git')!r}, expected {GIT_URL!r}")
    got = [(args[0], kwargs) for kind, args, kwargs in read.calls if kind == "version" and args]
    want = version_calls(catalog, sdists)
    if got != want:
        problems.append(f"versions {got} != {want} (main, the catalog version, spack/sdists.toml)")
    return problems


#: (spec, when) of dependencies whose bounds or conditions the build relies on.
REQUIRED_DEPENDENCIES = (
    (f"nccl@{NCCL_MIN}:", "tensor_ops=nccl"),
    (f"py-nanobind@{NANOBIND_MIN}:", None),
    ("py-tomli", "^python@:3.10"),
    ("py-torch", "frameworks=pytorch"),
    ("openssl", "controllers=gloo"),
    ("openssl", "tensor_ops=gloo"),
    ("mpi", "controllers=mpi"),
    ("mpi", "tensor_ops=mpi"),
)


def _dependency_problems(read: _Read) -> list[str]:
    deps = {(args[0], kwargs.get("when")) for kind, args, kwargs in read.calls if kind == "depends_on" and args}
    missing = [(spec, when) for spec, when in REQUIRED_DEPENDENCIES if (spec, when) not in deps]
    return [f"no depends_on({spec!r}, when={when!r})" for spec, when in missing]


def check_package(path: Path, catalog: Catalog, sdists: Mapping[str, str] | None = None) -> list[str]:
    """Every disagreement between package.py and the catalog ([] when none)."""
    if not path.is_file():
        return [f"{path} does not exist"]
    read = read_package(path)
    problems: list[str] = []
    expected_cls = class_name(catalog.spack_package)
    if read.cls != expected_cls:
        problems.append(f"class is {read.cls}, expected {expected_cls}")
    for base in ("PythonPackage", "CudaPackage"):
        if base not in read.bases:
            problems.append(f"class does not derive from {base}")
    problems += _source_problems(read, catalog, sdists if sdists is not None else load_sdists(sdists_path(catalog)))
    problems += _dependency_problems(read)
    variants = {args[0]: kwargs for kind, args, kwargs in read.calls if kind == "variant" and args}
    for name in PLAIN_VARIANTS:
        axis = catalog.axes[name]
        got = variants.pop(name, None)
        if got is None:
            problems.append(f"variant {name} is missing")
            continue
        if tuple(got.get("values", ())) != axis.values:
            problems.append(f"variant {name} values {got.get('values')} != catalog {axis.values}")
        if got.get("default") != _value_text(axis.default):
            problems.append(f"variant {name} default {got.get('default')!r} != catalog {_value_text(axis.default)!r}")
        if got.get("multi") != (axis.kind == "multi"):
            problems.append(f"variant {name} multi={got.get('multi')} but the catalog axis is {axis.kind}")
    if not _restricts_cuda_arch(path):
        problems.append(
            "no loop restricting CudaPackage.cuda_arch_values to HVD_VALUE_ORDER['cuda_arch'] and HVD_CUDA_LINES"
        )
    for extra in variants:
        problems.append(f"variant {extra} is not a catalog axis")
    directives = {
        Directive(kind, args[0], kwargs.get("when", ""), kwargs.get("msg", ""))
        for kind, args, kwargs in read.calls
        if kind in ("conflicts", "requires") and args
    }
    expected = set(constraint_directives(catalog))
    for d in sorted(expected - directives):
        problems.append(f"missing {d.kind}({d.spec!r}, when={d.when!r}) for {d.msg!r}")
    for d in sorted(directives - expected):
        problems.append(f"{d.kind}({d.spec!r}, when={d.when!r}) is not a catalog rule")
    cuda_deps = [
        args[0]
        for kind, args, kwargs in read.calls
        if kind == "depends_on" and args and str(args[0]).startswith("cuda@")
    ]
    if cuda_deps != [cuda_dependency(catalog)]:
        problems.append(f"CUDA dependency {cuda_deps} != [{cuda_dependency(catalog)!r}] (catalog cuda_lines)")
    expected_constants = {
        "HVD_TARGETS": targets_most_specific_first(catalog),
        "HVD_VALUE_ORDER": {a: catalog.axes[a].values for a in ("cuda_arch", "controllers", "frameworks")},
        "HVD_CUDA_LINES": {n: ln.archs for n, ln in catalog.cuda_lines.items()},
    }
    for name, value in expected_constants.items():
        if read.constants.get(name) != value:
            problems.append(f"{name} = {read.constants.get(name)!r}, expected {value!r}")
    return problems
