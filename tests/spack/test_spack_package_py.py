"""spack/packages/py-hvd-selector/package.py against the catalog: no Spack needed.

Three independent angles: the AST checker (variants, values, defaults,
directives, tables), a Spack-semantics model of the directives that must
accept exactly the catalog's buildable variants, and the file's own build
code run against a stub ``spack.package`` to compare what it sets with what
the backend reads.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from selector_backend.cli.main import main
from selector_backend.engine import targets
from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.variant import Variant
from selector_backend.errors import InputError
from selector_backend.install.build import missing_toolchain
from selector_backend.interop.spack.package_py import (
    GIT_URL,
    Directive,
    check_package,
    line_directives,
    load_sdists,
    package_path,
    read_package,
    render_package,
)
from selector_backend.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spack" / "packages" / "py-hvd-selector" / "package.py"


def test_committed_package_matches_the_catalog(catalog):
    assert package_path(catalog) == PACKAGE
    assert check_package(PACKAGE, catalog) == []
    assert PACKAGE.read_text() == render_package(catalog), "run: hvd-selector spack package --write"
    assert (ROOT / "spack" / "repo.yaml").read_text().count("namespace: hvd_selector") == 1


def test_mirrors_py_horovod_variant_names_and_its_nccl_conflict():
    read = read_package(PACKAGE)
    assert read.cls == "PyHvdSelector" and read.bases == ("PythonPackage", "CudaPackage")
    variants = {args[0]: kw for kind, args, kw in read.calls if kind == "variant"}
    # cuda and cuda_arch stay CudaPackage's own (redefining cuda_arch breaks CudaPackage's directives)
    assert set(variants) == {"frameworks", "controllers", "tensor_ops"}
    assert variants["tensor_ops"]["multi"] is False and variants["controllers"]["multi"] is True
    calls = [(kind, args[0], kw.get("when")) for kind, args, kw in read.calls]
    assert ("conflicts", "tensor_ops=nccl", "~cuda") in calls  # as py-horovod (which adds ~rocm)
    assert ("conflicts", "cuda_arch=none", "+cuda") in calls
    assert ("depends_on", "mpi", "controllers=mpi") in calls


def _mutated_catalog(tmp_path, old, new):
    src = ROOT / "variants" / "catalog.toml"
    text = src.read_text()
    assert old in text
    (tmp_path / "variants").mkdir()
    path = tmp_path / "variants" / "catalog.toml"
    path.write_text(text.replace(old, new, 1))
    return load_catalog(path)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            'cmake = "HVD_TENSOR_OPS"\ndefault = "gloo"',
            'cmake = "HVD_TENSOR_OPS"\ndefault = "mpi"',
            "variant tensor_ops default 'gloo' != catalog 'mpi'",
        ),
        ('"89", "90", "100"', '"89", "90", "90a", "100"', "HVD_VALUE_ORDER"),
        ('toolkit = "12.4"', 'toolkit = "12.6"', "CUDA dependency"),
        (
            'message = "tensor_ops=mpi needs the mpi controller"',
            'message = "MPI ops need the MPI controller"',
            "missing requires('controllers=mpi', when='tensor_ops=mpi')",
        ),
    ],
)
def test_checker_catches_drift(tmp_path, old, new, problem):
    catalog = _mutated_catalog(tmp_path, old, new)
    problems = check_package(PACKAGE, catalog)
    assert any(problem in p for p in problems), problems


# ------------------------------------------------------------------ Spack semantics of the directives
def _holds(cond: str, v: Variant) -> bool:
    """A condition of one directive, as Spack evaluates it on a concrete spec."""
    if cond in ("+cuda", "~cuda"):
        return (v["cuda"] != "none") == (cond == "+cuda")
    if cond.startswith("^cuda@"):
        return v["cuda"] == cond.removeprefix("^cuda@")
    axis, _, value = cond.partition("=")
    return value in v.values_of(axis)  # multi-valued: the set contains it


def _spack_accepts(directives, v: Variant) -> bool:
    for kind, spec, when in directives:
        if kind == "conflicts" and _holds(spec, v) and _holds(when, v):
            return False
        if kind == "requires" and _holds(when, v) and not _holds(spec, v):
            return False
    return True


def test_directives_accept_exactly_the_buildable_variants(catalog, package_module):
    """The directives Spack would see (the file run against a stub spack.package), modelled."""
    _, stub = package_module
    directives = [(k, a[0], kw.get("when")) for k, a, kw in stub.calls if k in ("conflicts", "requires")]
    directives = [d for d in directives if d[2] is not None]  # whole-arch refusals are tested below
    arch_sets = [("none",), ("50",), ("80",), ("100",), ("80", "90"), ("61", "121")]
    checked = 0
    for cuda, archs, ops, ctrl in itertools.product(
        ("none", "12", "13"), arch_sets, ("nccl", "mpi", "gloo"), (("mpi",), ("gloo",), ("mpi", "gloo"))
    ):
        if cuda == "none" and archs != ("none",):
            continue  # Spack has no cuda_arch without +cuda
        v = catalog.make_variant(
            {
                "target": "x86_64_v3",
                "cuda": cuda,
                "cuda_arch": archs,
                "tensor_ops": ops,
                "controllers": ctrl,
                "frameworks": ("pytorch",),
            }
        )
        assert _spack_accepts(directives, v) == (not catalog.violations(v)), (v, catalog.violations(v))
        checked += 1
    assert checked == 117  # (1 + 2 CUDA lines x 6 arch sets) x 3 tensor_ops x 3 controller sets


# ------------------------------------------------------------------ the file's own build code
SPACK_CUDA_ARCHS = (
    "10", "11", "12", "13", "20", "21", "30", "32", "35", "37", "50", "52", "53", "60", "61", "62", "70", "72",
    "75", "80", "86", "87", "89", "90", "90a", "100", "100a", "100f", "101", "101a", "101f", "103", "103a",
    "103f", "110", "110a", "110f", "120", "120a", "120f", "121", "121a", "121f",
)  # fmt: skip


class _Recorder(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("spack.package")
        self.calls: list[tuple[str, tuple, dict]] = []
        for name in ("version", "variant", "depends_on", "conflicts", "requires", "license"):
            setattr(self, name, self._directive(name))
        self.any_combination_of = lambda *values: ("any_combination_of", values)
        self.PythonPackage = type("PythonPackage", (), {})
        # Spack's CudaPackage.cuda_arch_values (spack-packages, 2025): more than the catalog builds
        self.CudaPackage = type("CudaPackage", (), {"cuda_arch_values": SPACK_CUDA_ARCHS})

    def _directive(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))

        return record


@pytest.fixture
def package_module(monkeypatch):
    stub = _Recorder()
    monkeypatch.setitem(sys.modules, "spack", types.ModuleType("spack"))
    monkeypatch.setitem(sys.modules, "spack.package", stub)
    spec = importlib.util.spec_from_file_location("hvd_spack_package", PACKAGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, stub


class _Version:
    def __init__(self, text):
        self.text = text

    def up_to(self, n):
        return ".".join(self.text.split(".")[:n])


class _Spec:
    """Just enough of a concrete Spack spec for setup_build_environment."""

    def __init__(self, target, cuda_version, variants):
        self.target, self.cuda_version, self._variants = target, cuda_version, variants
        self.variants = {k: types.SimpleNamespace(value=v) for k, v in variants.items()}

    def satisfies(self, cond):
        if cond == "+cuda":
            return self.cuda_version is not None
        if cond.startswith("target=") and cond.endswith(":"):
            return targets.runs_on(cond[len("target=") : -1], self.target)
        raise AssertionError(cond)

    def __getitem__(self, name):
        prefix = _Prefix(f"/spack/opt/{name}-hash")
        if name == "cuda":
            return types.SimpleNamespace(version=_Version(self.cuda_version), prefix=prefix)
        if name == "mpi":  # Spack's MPI providers set spec.mpicc in setup_dependent_package
            return types.SimpleNamespace(prefix=prefix, mpicc=f"{prefix}/bin/mpicc")
        return types.SimpleNamespace(prefix=prefix)


class _Prefix(str):
    """Spack's Prefix: a str whose attributes are subdirectories."""

    def __getattr__(self, name):
        return _Prefix(f"{self}/{name}")


class _Env:
    def __init__(self):
        self.values = {}
        self.prepended = {}

    def set(self, key, value):
        self.values[key] = str(value)

    def prepend_path(self, key, value):
        self.prepended.setdefault(key, []).insert(0, str(value))


def test_file_imports_under_spack_and_declares_what_the_ast_sees(package_module, catalog):
    module, stub = package_module
    assert [c[0] for c in stub.calls].count("variant") == 3
    # every CudaPackage arch the catalog lacks is a conflict; every catalog arch stays allowed
    refused = {
        a[0].removeprefix("cuda_arch=")
        for n, a, kw in stub.calls
        if n == "conflicts" and "when" not in kw and a[0].startswith("cuda_arch=")
    }
    catalog_archs = set(catalog.axes["cuda_arch"].values) - {"none"}
    assert refused == set(SPACK_CUDA_ARCHS) - catalog_archs
    assert catalog_archs <= set(SPACK_CUDA_ARCHS)
    per_line = {
        Directive(n, a[0], kw["when"], kw["msg"])
        for n, a, kw in stub.calls
        if n == "conflicts" and str(kw.get("when", "")).startswith("^cuda@")
    }
    assert per_line == set(line_directives(catalog, SPACK_CUDA_ARCHS))
    assert ("conflicts", "cuda_arch=100", "^cuda@12") in {d[:3] for d in per_line}
    # Spack's nccl is a CudaPackage too: it gets the same archs
    nccl = {(a[0], kw["when"]) for n, a, kw in stub.calls if n == "depends_on" and a[0].startswith("nccl+cuda")}
    assert nccl == {(f"nccl+cuda cuda_arch={a}", f"tensor_ops=nccl cuda_arch={a}") for a in catalog_archs}
    # fetchable: main from git, the unpublished catalog version as its git tag
    assert [(a, kw) for n, a, kw in stub.calls if n == "version"] == [
        (("main",), {"branch": "main"}),
        (("0.1.0",), {"tag": "v0.1.0"}),
    ]
    assert module.PyHvdSelector.git == GIT_URL and GIT_URL.startswith("https://")
    # PyTorch built for the same archs as the GPU build
    torch = {(a[0], kw["when"]) for n, a, kw in stub.calls if n == "depends_on" and a[0].startswith("py-torch+cuda")}
    assert torch == {(f"py-torch+cuda cuda_arch={a}", f"frameworks=pytorch cuda_arch={a}") for a in catalog_archs}
    assert module.PyHvdSelector.__name__ == "PyHvdSelector"


@pytest.mark.parametrize("host_target", [None, "zen3", "sapphirerapids", "neoverse_v2"])
def test_build_environment_asks_the_backend_for_every_prebuilt_variant(package_module, catalog, host_target):
    """The package tells the backend the variant (which writes CMake's build description, as for
    its own source builds); CMake itself is handed no HVD_* axis option, which it would not read."""
    module, _ = package_module
    for variant in catalog.prebuilt_variants():
        target = host_target if host_target and targets.runs_on(str(variant["target"]), host_target) else None
        spack_target = target or str(variant["target"])
        cuda = None if variant["cuda"] == "none" else catalog.cuda_lines[str(variant["cuda"])].toolkit + ".1"
        spec = _Spec(
            spack_target,
            cuda,
            {
                "tensor_ops": variant["tensor_ops"],
                # Spack hands multi values sorted alphabetically; the file must reorder them
                "controllers": tuple(sorted(variant.values_of("controllers"))),
                "frameworks": variant.values_of("frameworks"),
                "cuda_arch": tuple(sorted(variant.values_of("cuda_arch"))),
            },
        )
        pkg = module.PyHvdSelector()
        pkg.spec = spec
        env = _Env()
        pkg.setup_build_environment(env)
        want = variant
        if target is not None:  # a microarch spec builds for the most specific catalog target it runs
            best = max(
                (t for t in catalog.axes["target"].values if targets.runs_on(t, target)), key=targets.specificity
            )
            want = catalog.make_variant({**dict(variant.items()), "target": best})
        parsed = catalog.parse_variant(env.values["HVD_SELECTOR_VARIANT"])
        assert parsed == want
        got = dict(item.split("=", 1) for item in env.values["SKBUILD_CMAKE_DEFINE"].split(";"))
        assert not {catalog.axes[axis].cmake for axis in catalog.axes} & set(got)
        assert env.values["HVD_SELECTOR_BUILD_POLICY"] == "always-build"
        # the backend's own settings loader accepts what the package sets
        settings = load_settings(environ={k: v for k, v in env.values.items() if k.startswith("HVD_SELECTOR_")})
        assert settings.build_policy == "always-build" and settings.offline is True
        assert catalog.parse_variant(settings.variant) == parsed


def test_generated_file_is_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    fmt = subprocess.run([ruff, "format", "--diff", str(PACKAGE)], capture_output=True, text=True, cwd=ROOT)
    assert fmt.returncode == 0, fmt.stdout
    lint = subprocess.run([ruff, "check", str(PACKAGE)], capture_output=True, text=True, cwd=ROOT)
    assert lint.returncode == 0, lint.stdout


def test_cli_package_check_and_write(tmp_path, capsys):
    assert main(["spack", "package", "--check"]) == 0
    repo = tmp_path / "repo"
    assert main(["spack", "package", "--write", "--repo", str(repo)]) == 0
    written = repo / "packages" / "py-hvd-selector" / "package.py"
    assert written.read_text() == PACKAGE.read_text()
    written.write_text(written.read_text().replace('"mpi", "gloo"', '"gloo", "mpi"', 1))
    assert main(["spack", "package", "--check", "--repo", str(repo)]) == 3
    assert "drifted from the catalog" in capsys.readouterr().err


def test_cli_package_takes_the_sdists_beside_the_repo_it_writes(tmp_path, capsys, catalog):
    """A release's repository lists its sdist in REPO/sdists.toml: --write --repo REPO makes it a
    checksummed version (the command once read only the project's spack/sdists.toml)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    sha = "ab" * 32
    (repo / "sdists.toml").write_text(f'[sdists]\n"{catalog.version}" = "{sha}"\n')
    assert main(["spack", "package", "--write", "--repo", str(repo)]) == 0
    written = repo / "packages" / "py-hvd-selector" / "package.py"
    assert f'version("{catalog.version}", sha256="{sha}")' in written.read_text()
    assert main(["spack", "package", "--check", "--repo", str(repo)]) == 0
    (repo / "sdists.toml").write_text("[sdists]\n")  # withdrawn: the written file is stale now
    assert main(["spack", "package", "--check", "--repo", str(repo)]) == 3
    assert "versions" in capsys.readouterr().err


def test_old_spack_without_blackwell_archs_gets_no_directive_naming_them(monkeypatch, catalog):
    """Spack 0.23's CudaPackage has no cuda_arch=100: naming it in a directive is an error there."""
    stub = _Recorder()
    stub.CudaPackage.cuda_arch_values = tuple(a for a in SPACK_CUDA_ARCHS if int(a.rstrip("af")) < 100)
    monkeypatch.setitem(sys.modules, "spack", types.ModuleType("spack"))
    monkeypatch.setitem(sys.modules, "spack.package", stub)
    spec = importlib.util.spec_from_file_location("hvd_spack_package_old", PACKAGE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    named = {a[0] for n, a, _ in stub.calls if n == "conflicts" and a[0].startswith("cuda_arch=")}
    archs = {x.split("=")[1] for x in named} - {"none"}
    assert archs and not any(int(a.rstrip("af")) >= 100 for a in archs)
    lines = {(a[0], kw["when"]) for n, a, kw in stub.calls if n == "conflicts" and "when" in kw}
    assert ("cuda_arch=61", "^cuda@13") in lines and ("cuda_arch=75", "^cuda@12") not in lines


def test_checker_requires_the_cuda_arch_restriction(tmp_path, catalog):
    text = PACKAGE.read_text().replace('if _arch not in HVD_VALUE_ORDER["cuda_arch"]:', "if False:")
    path = tmp_path / "package.py"
    path.write_text(text)
    assert any("restricting CudaPackage.cuda_arch_values" in p for p in check_package(path, catalog))


# ------------------------------------------------------------------ where Spack's dependencies are
def _libraries_used(variant):
    """Independently of the file: the libraries a variant links, and CUDA for a GPU build."""
    uses = {*variant.values_of("tensor_ops"), *variant.values_of("controllers")}
    libs = {lib for lib in ("mpi", "nccl") if lib in uses} | (
        {"openssl"} if "gloo" in variant.values_of("controllers") else set()
    )
    return libs | ({"cuda"} if variant["cuda"] != "none" else set())


def test_every_library_the_variant_uses_reaches_cmake_with_link_path_rpaths(package_module, catalog):
    module, _ = package_module
    seen = set()
    for variant in catalog.prebuilt_variants():
        cuda = None if variant["cuda"] == "none" else catalog.cuda_lines[str(variant["cuda"])].toolkit + ".1"
        pkg = module.PyHvdSelector()
        pkg.spec = _Spec(
            str(variant["target"]),
            cuda,
            {
                "tensor_ops": variant["tensor_ops"],
                "controllers": variant.values_of("controllers"),
                "frameworks": variant.values_of("frameworks"),
                "cuda_arch": variant.values_of("cuda_arch"),
            },
        )
        env = _Env()
        pkg.setup_build_environment(env)
        used = _libraries_used(variant)
        seen |= used
        prefixes = env.prepended.get("CMAKE_PREFIX_PATH", [])
        assert sorted(prefixes) == sorted(f"/spack/opt/{lib}-hash" for lib in used), variant
        defines = dict(item.split("=", 1) for item in env.values["SKBUILD_CMAKE_DEFINE"].split(";"))
        # RPATHs to every linked library outside the build tree (spack verify libraries)
        assert defines["CMAKE_INSTALL_RPATH_USE_LINK_PATH"] == "ON"
        # scikit-build-core runs Spack's cmake, not a cmake module of the Python prefix
        assert env.values["CMAKE_EXECUTABLE"] == "/spack/opt/cmake-hash/bin/cmake"
        assert ("MPI_C_COMPILER" in defines) == ("mpi" in used)
        if "mpi" in used:
            assert defines["MPI_C_COMPILER"] == env.values["MPICC"] == "/spack/opt/mpi-hash/bin/mpicc"
        assert env.values.get("HVD_NCCL_HOME") == ("/spack/opt/nccl-hash" if "nccl" in used else None)
        assert env.values.get("CUDACXX") == ("/spack/opt/cuda-hash/bin/nvcc" if cuda else None)
    assert seen == {"openssl", "mpi", "nccl", "cuda"}  # the prebuilt variants cover every library


def test_a_gloo_build_needs_no_gloo_from_spack(package_module, catalog):
    """The gloo controller links no Gloo: Spack hands the build OpenSSL's prefix only and the
    backend's toolchain check asks for no Gloo, so py-torch keeps whatever gloo it wants."""
    module, _ = package_module
    values = {"tensor_ops": "gloo", "controllers": ("gloo",), "cuda": "none"}
    assert module.hvd_libraries(values) == ["openssl"]
    env_vars, prefix_path, _ = module.hvd_dependency_settings(values, {"openssl": "/o"}, None, "/usr/bin/cmake")
    assert prefix_path == ["/o"] and env_vars == {"CMAKE_EXECUTABLE": "/usr/bin/cmake"}
    variant = catalog.parse_variant(
        "target=x86_64 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"
    )
    assert not [p for p in missing_toolchain(variant) if "gloo" in p.lower()]
    deps = [line for line in PACKAGE.read_text().splitlines() if "depends_on(" in line]
    assert not [line for line in deps if '"gloo' in line], deps


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('"nccl@2.19:"', '"nccl"', "no depends_on('nccl@2.19:', when='tensor_ops=nccl')"),
        ('"py-nanobind@2.2:"', '"py-nanobind"', "no depends_on('py-nanobind@2.2:', when=None)"),
        ('when="^python@:3.10"', 'when="^python@:3.9"', "no depends_on('py-tomli', when='^python@:3.10')"),
        ('"py-torch", type="run"', '"py-tensorflow", type="run"', "no depends_on('py-torch'"),
        ('git = "https://', 'git = "http://', "git = 'http://"),
        ('version("main", branch="main")', "", "versions"),
        ('version("0.1.0", tag="v0.1.0")', 'version("0.1.0")', "versions"),
    ],
)
def test_checker_catches_a_lost_bound_or_source(tmp_path, catalog, old, new, problem):
    text = PACKAGE.read_text()
    assert old in text
    path = tmp_path / "package.py"
    path.write_text(text.replace(old, new, 1))
    problems = check_package(path, catalog)
    assert any(problem in p for p in problems), problems


def test_published_sdists_become_checksummed_versions(tmp_path, catalog):
    sha = "ab" * 32
    sdists = tmp_path / "sdists.toml"
    sdists.write_text(f'[sdists]\n"0.0.9" = "{"cd" * 32}"\n"{catalog.version}" = "{sha}"\n')
    published = load_sdists(sdists)
    text = render_package(catalog, published)
    assert f'version("{catalog.version}", sha256="{sha}")' in text
    assert f'tag="v{catalog.version}"' not in text  # published: the sdist, not the tag
    assert text.index(f'version("{catalog.version}"') < text.index('version("0.0.9"')  # newest first
    path = tmp_path / "package.py"
    path.write_text(text)
    assert check_package(path, catalog, published) == []
    assert any("versions" in p for p in check_package(PACKAGE, catalog, published))  # stale file
    sdists.write_text('[sdists]\n"0.2.0" = "not-a-sha"\n')
    with pytest.raises(InputError, match="not a lowercase hex sha256"):
        load_sdists(sdists)
    assert load_sdists(tmp_path / "missing.toml") == {}
