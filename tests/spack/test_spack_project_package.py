"""package.py for a project of its own (interop/spack/project_package.py), with python-xxhash's catalog.

The checks hvd-selector's own package.py passes, applied to the generated file:
ruff-clean, importable under a stub ``spack.package`` with the directives it
declares recorded, directives that accept exactly the catalog's buildable
variants (modelled as Spack evaluates them), and a build environment the
backend's own settings loader reads back as the spec's variant.
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
from selector_backend.engine.catalog import load_catalog
from selector_backend.settings import load_settings
from tests.backend.adopter import CATALOG, TABLE, bare_project

from .test_spack_package_py import _Env, _Recorder, _spack_accepts, _Spec

ROOT = Path(__file__).resolve().parents[2]
SDIST_SHA256 = "84f2caddf951c9cbf8dc2e22a89d4ccf5d86391ac6418fe81e3c67d0cf60b45f"  # xxhash-3.5.0.tar.gz

#: xxhash's catalog with axes of its own, as a project with a dispatch choice and a threading option would write
AXES = """
[axes.dispatch]
values = ["static", "runtime"]
description = "SIMD kernel chosen at compile time or at run time"

[axes.threads]
kind = "multi"
values = ["pthreads", "openmp"]
default = "pthreads"

[[constraints]]
when = { dispatch = "runtime" }
forbid = { threads = "openmp" }
message = "run-time dispatch is not OpenMP-safe"

[[prebuilt]]
name = "cpu"
target = ["x86_64", "x86_64_v2", "x86_64_v3"]
dispatch = "static"
threads = ["pthreads"]
"""


def generate(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """``hvd-selector spack package --write`` run in the project; the package.py it wrote."""
    spack = root / "spack"
    spack.mkdir()
    (spack / "sdists.toml").write_text(f'[sdists]\n"3.5.0" = "{SDIST_SHA256}"\n')
    monkeypatch.chdir(root)
    assert main(["spack", "package", "--write"]) == 0, capsys.readouterr().err
    path = spack / "packages" / "py-xxhash" / "package.py"
    assert capsys.readouterr().out == f"wrote {path}\n"
    return path


def imported(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, _Recorder]:
    stub = _Recorder()
    monkeypatch.setitem(sys.modules, "spack", types.ModuleType("spack"))
    monkeypatch.setitem(sys.modules, "spack.package", stub)
    spec = importlib.util.spec_from_file_location("project_spack_package", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, stub


def build_variant(module: types.ModuleType, target: str, values: dict[str, object]) -> str:
    pkg = module.PyXxhash()
    pkg.spec = _Spec(target, None, values)
    env = _Env()
    pkg.setup_build_environment(env)
    settings = load_settings(environ={k: v for k, v in env.values.items() if k.startswith("HVD_SELECTOR_")})
    assert settings.build_policy == "always-build" and settings.offline is True
    return str(settings.variant)


def test_xxhash_catalog_gives_a_package_spack_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = generate(bare_project(tmp_path / "xxhash"), monkeypatch, capsys)
    ruff = shutil.which("ruff") or "ruff"
    for check in (["format", "--diff"], ["check", "--ignore", "INP001"]):  # INP001: as pyproject's spack/**
        done = subprocess.run([ruff, *check, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    module, stub = imported(path, monkeypatch)
    assert [(a, kw) for n, a, kw in stub.calls if n == "version"] == [(("3.5.0",), {"sha256": SDIST_SHA256})]
    assert [n for n, _, _ in stub.calls if n in ("variant", "conflicts", "requires")] == []
    assert ("py-setuptools@61:",) in [a for n, a, _ in stub.calls if n == "depends_on"]
    assert module.PyXxhash.pypi == "xxhash/xxhash-3.5.0.tar.gz"
    catalog = load_catalog(tmp_path / "xxhash" / "variants.toml")
    # a spec's target builds the most specific catalog target it runs
    for spack_target, built in (("zen2", "x86_64_v3"), ("nehalem", "x86_64_v2"), ("core2", "x86_64")):
        assert catalog.parse_variant(build_variant(module, spack_target, {})) == catalog.parse_variant(
            {"target": built}
        )
    assert main(["spack", "package", "--check"]) == 0
    path.write_text(path.read_text().replace('"x86_64_v3", ', "", 1))
    assert main(["spack", "package", "--check"]) == 3
    assert "differs from what the catalog generates" in capsys.readouterr().err


def test_a_projects_own_axes_are_variants_and_its_constraints_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = bare_project(tmp_path / "xxhash", TABLE)
    (root / "variants.toml").write_text(CATALOG.split("\n[[prebuilt]]")[0] + AXES)
    path = generate(root, monkeypatch, capsys)
    module, stub = imported(path, monkeypatch)
    variants = {a[0]: kw for n, a, kw in stub.calls if n == "variant"}
    assert variants == {
        "dispatch": {
            "default": "static",
            "description": "SIMD kernel chosen at compile time or at run time",
            "values": ("static", "runtime"),
            "multi": False,
        },
        "threads": {
            "default": "pthreads",
            "description": "the catalog's threads axis",
            "values": ("pthreads", "openmp"),
            "multi": True,
        },
    }
    catalog = load_catalog(root / "variants.toml")
    directives = [(k, a[0], kw.get("when")) for k, a, kw in stub.calls if k in ("conflicts", "requires")]
    checked = 0
    for dispatch, threads in itertools.product(
        ("static", "runtime"), (("pthreads",), ("openmp",), ("pthreads", "openmp"))
    ):
        v = catalog.make_variant({"target": "x86_64_v3", "dispatch": dispatch, "threads": threads})
        assert _spack_accepts(directives, v) == (not catalog.violations(v)), v
        checked += 1
        if not catalog.violations(v):  # what Spack accepts, the backend is told as exactly that variant
            built = build_variant(module, "zen2", {"dispatch": dispatch, "threads": tuple(sorted(threads))})
            assert catalog.parse_variant(built) == v
    assert checked == 6


def test_a_catalog_with_cuda_axes_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = bare_project(tmp_path / "gpu")
    cuda = '\n[axes.cuda]\nvalues = ["none", "12"]\n'
    cuda += '\n[axes.cuda_arch]\nkind = "multi"\nvalues = ["none", "80"]\ndefault = "none"\n'
    cuda += '\n[cuda_lines.12]\ntoolkit = "12.4"\narchs = ["80"]\n'
    (root / "variants.toml").write_text(
        CATALOG.replace("\n[[prebuilt]]", cuda + "\n[[prebuilt]]") + 'cuda = "none"\ncuda_arch = "none"\n'
    )
    monkeypatch.chdir(root)
    assert main(["spack", "package"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has the axis cuda, which only hvd-selector's own package.py" in err
