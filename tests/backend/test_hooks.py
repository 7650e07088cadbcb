"""PEP 517 hooks called in-process: the decisions the backend makes before anything builds."""

from __future__ import annotations

import email.parser
import hashlib
import tarfile
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from selector_backend.install import backend
from selector_backend.install.build import BASE_BUILD_REQUIRES, without_tools_on_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def project_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run hooks from the project root with a clean, isolated configuration."""
    monkeypatch.chdir(ROOT)
    for name in list(__import__("os").environ):
        if name.startswith("HVD_SELECTOR"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HVD_SELECTOR_CONFIG", str(tmp_path / "no-config.toml"))
    (tmp_path / "no-config.toml").write_text("")
    monkeypatch.setenv("HVD_SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    backend._pyproject.cache_clear()


def exit_code(excinfo: pytest.ExceptionInfo[SystemExit]) -> int:
    return int(excinfo.value.code)  # type: ignore[arg-type]


def test_metadata_is_static_and_identical_for_every_variant(tmp_path: Path) -> None:
    texts = []
    for settings in ({}, {"selector": "cpu"}, {"variant": "target=x86_64_v4"}, {"selector": "gpu-nvidia"}):
        out = tmp_path / str(len(texts))
        out.mkdir()
        name = backend.prepare_metadata_for_build_wheel(str(out), settings)
        texts.append((out / name / "METADATA").read_text())
    assert len(set(texts)) == 1
    meta = email.parser.Parser().parsestr(texts[0])
    assert meta["Name"] == "hvd-selector"
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("archspec") for r in requires)
    # NCCL: the CUDA line's own extra, or the companion that answers per host (install.nccl_companion)
    assert [r for r in requires if 'extra == "gpu-nvidia"' in r] == ['hvd-selector-nccl==0.1.0; extra == "gpu-nvidia"']
    assert any('extra == "gpu-nvidia-cu12"' in r and r.startswith("nvidia-nccl-cu12") for r in requires)
    assert any('extra == "gpu-nvidia-cu13"' in r and r.startswith("nvidia-nccl-cu13") for r in requires)
    assert any('extra == "mpi"' in r and r.startswith("mpich") for r in requires)
    assert any('extra == "ray"' in r and r.startswith("ray") for r in requires)
    extras = ["ci", "gpu-nvidia", "gpu-nvidia-cu12", "gpu-nvidia-cu13", "horovod", "mpi", "ray"]
    assert sorted(meta.get_all("Provides-Extra")) == extras


def test_forced_variant_asks_for_the_build_toolchain_only() -> None:
    requires = backend.get_requires_for_build_wheel({"variant": "target=x86_64_v3"})
    assert requires == without_tools_on_path(BASE_BUILD_REQUIRES)


def fake_tool(bin_dir: Path, name: str, prints: str) -> None:
    (bin_dir / name).write_text(f"#!/bin/sh\necho '{prints}'\n")
    (bin_dir / name).chmod(0o755)


def test_cmake_and_ninja_on_path_are_not_asked_for_when_new_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As scikit-build-core decides: a PATH cmake or ninja that meets the requirement serves, so pip
    does not unpack their wheels into the isolated build environment; too old, silent or absent, pip
    installs them."""
    wanted = ["scikit-build-core>=0.10", "cmake>=3.24", "ninja>=1.10"]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert without_tools_on_path(wanted) == wanted  # neither is on PATH
    fake_tool(tmp_path, "cmake", "cmake version 3.31.6\n\nCMake suite maintained and supported by Kitware")
    fake_tool(tmp_path, "ninja", "1.11.1")
    assert without_tools_on_path(wanted) == ["scikit-build-core>=0.10"]
    fake_tool(tmp_path, "cmake", "cmake version 3.22.1")
    fake_tool(tmp_path, "ninja", "ninja: unknown option")
    assert without_tools_on_path(wanted) == wanted
    fake_tool(tmp_path, "cmake", "cmake version 4.1.0-rc2")
    assert without_tools_on_path(["cmake>=3.24; python_version > '3'", "cmake>=3.24"]) == [
        "cmake>=3.24; python_version > '3'"
    ]  # a marker is pip's to evaluate


def test_nccl_source_build_asks_for_the_nccl_wheel_of_its_cuda_line() -> None:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.host import HostProfile
    from selector_backend.install.build import build_requires

    catalog = load_catalog()
    for line in ("12", "13"):
        variant = catalog.parse_variant(
            f"target=x86_64_v3 cuda={line} cuda_arch=80 tensor_ops=nccl controllers=gloo", fill_defaults=True
        )
        requires = build_requires(variant, HostProfile())
        assert f"nvidia-nccl-cu{line}" in requires
        assert f"nvidia-nccl-cu{'13' if line == '12' else '12'}" not in requires


def _nvcc_major() -> str | None:
    import shutil

    from selector_backend.install.build import nvcc_release

    nvcc = shutil.which("nvcc")
    release = nvcc_release(nvcc) if nvcc else None
    return release.split(".")[0] if release else None


@pytest.mark.skipif(_nvcc_major() is None, reason="needs an nvcc on PATH (.ci/install-deps installs CUDA 13)")
def test_source_build_with_the_wrong_cuda_nvcc_fails_before_any_download(capsys: pytest.CaptureFixture[str]) -> None:
    """nvcc 13 + a cuda=12 build: exit 4 from get_requires, so pip never fetches nvidia-nccl-cu12."""
    have = _nvcc_major()
    other = "12" if have == "13" else "13"
    variant = f"target=x86_64_v3 cuda={other} cuda_arch=80 tensor_ops=nccl controllers=gloo"
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"variant": variant})
    assert exit_code(excinfo) == 4
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert f"needs CUDA {other}.x nvcc" in line and f"is CUDA {have}." in line
    same = backend.get_requires_for_build_wheel({"variant": variant.replace(f"cuda={other}", f"cuda={have}")})
    assert f"nvidia-nccl-cu{have}" in same


def test_no_index_means_source_build_of_the_ideal_variant(capsys: pytest.CaptureFixture[str]) -> None:
    plan = backend.make_plan({"target": "x86_64_v3", "mpi": "none"})
    assert plan.kind == "source"
    assert plan.variant["target"] == "x86_64_v3"
    assert plan.variant["tensor_ops"] == "gloo"
    assert "no variant index is configured" in plan.reason


def test_never_build_without_a_fit_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"build-policy": "never-build"})
    assert exit_code(excinfo) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hvd-selector: error:") and "never-build" in err[-1]


def test_unknown_setting_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"selecter": "cpu"})
    assert exit_code(excinfo) == 2
    assert "did you mean selector?" in capsys.readouterr().err


def test_misspelled_selector_never_does_something_else(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"selector": "gpu-nvida"})
    assert exit_code(excinfo) == 2
    assert "did you mean gpu-nvidia?" in capsys.readouterr().err


def test_plain_http_to_a_remote_index_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"index-url": "http://example.org/simple"})
    assert exit_code(excinfo) == 2
    assert "https" in capsys.readouterr().err


def test_unreachable_index_falls_back_to_a_source_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "site").mkdir()
    with serve(tmp_path / "site") as server:
        server.queue("/simple/hvd-selector/", "500", "500", "500")
        requires = backend.get_requires_for_build_wheel(
            {"index-url": f"{server.url}/simple", "index-retries": "2", "index-timeout": "2"}
        )
        assert server.count("/simple/hvd-selector/") == 3
    assert requires == without_tools_on_path(BASE_BUILD_REQUIRES)
    assert "falling back to a source build" in capsys.readouterr().err


def test_unreachable_index_with_never_build_fails_with_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "site").mkdir()
    with serve(tmp_path / "site") as server:
        server.queue("/simple/hvd-selector/", "500", "500")
        with pytest.raises(SystemExit) as excinfo:
            backend.get_requires_for_build_wheel(
                {"index-url": f"{server.url}/simple", "index-retries": "1", "build-policy": "never-build"}
            )
    assert exit_code(excinfo) == 4
    assert "failed after 2 attempts" in capsys.readouterr().err


def test_build_sdist_embeds_the_index_url(tmp_path: Path) -> None:
    pytest.importorskip("scikit_build_core")
    name = backend.build_sdist(str(tmp_path), {"index-url": "https://variants.example.org/simple"})
    with tarfile.open(tmp_path / name) as sdist:
        names = sdist.getnames()
        top = names[0].split("/")[0]
        text = sdist.extractfile(f"{top}/pyproject.toml").read().decode()  # type: ignore[union-attr]
    assert "[tool.hvd-selector]" in text and 'index-url = ["https://variants.example.org/simple"]' in text
    assert f"{top}/selector_backend/install/backend.py" in names and f"{top}/variants/catalog.toml" in names
    assert not any("/build/" in n or "__pycache__" in n for n in names)


def test_build_sdist_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    """A re-run release job re-publishes the same sdist: published files are immutable, so the
    bytes must not depend on the build (the gzip header once named the rewrite's temp file)."""
    pytest.importorskip("scikit_build_core")
    digests = []
    for attempt in ("one", "two"):
        out = tmp_path / attempt
        out.mkdir()
        name = backend.build_sdist(str(out), {"index-url": "https://variants.example.org/simple"})
        digests.append(hashlib.sha256((out / name).read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_editable_installs_always_build_from_source_even_with_an_index(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    with serve(tmp_path / "site") as server:
        requires = backend.get_requires_for_build_editable({"index-url": f"{server.url}/simple", "mpi": "none"})
        assert server.count("/simple/hvd-selector/") == 0  # the index is not even read
    assert requires == without_tools_on_path(BASE_BUILD_REQUIRES)
    plan = backend.make_plan({"mpi": "none", "target": "x86_64_v3"}, editable=True)
    assert plan.kind == "source" and plan.variant["target"] == "x86_64_v3"


def test_missing_toolchain_is_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for name in ("CXX", "MPICC", "CUDACXX"):
        monkeypatch.delenv(name, raising=False)
    variant = "target=x86_64_v3 cuda=13 cuda_arch=90 tensor_ops=nccl controllers=gloo,mpi"
    with pytest.raises(SystemExit) as excinfo:
        backend.build_wheel(str(tmp_path), {"variant": variant})
    assert exit_code(excinfo) == 4
    lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(lines) == 1
    needed = ["C++17 compiler", "mpicc", "recipes/"]
    if not Path("/usr/local/cuda/bin/nvcc").exists():  # the one absolute place also looked at
        needed.append("nvcc")
    for word in needed:
        assert word in lines[0]


def _events(trace: Path) -> list[str]:
    import json

    return [json.loads(line)["event"] for line in trace.read_text().splitlines()] if trace.exists() else []


def test_a_plan_is_reused_only_while_every_input_is_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("HVD_SELECTOR_TRACE", str(trace))
    first = backend.make_plan({"selector": "cpu"})
    second = backend.make_plan({"selector": "cpu"})
    assert _events(trace) == ["plan-computed", "plan-reused"]
    assert (second.kind, second.variant, second.reason) == (first.kind, first.variant, first.reason)
    assert second.host == first.host
    # a different -C setting, environment variable or config file is a different decision
    backend.make_plan({"selector": "cpu", "build-policy": "always-build"})
    monkeypatch.setenv("HVD_SELECTOR_TARGET", "x86_64_v3")
    pinned = backend.make_plan({"selector": "cpu"})
    assert pinned.host.cpu is not None and pinned.host.cpu.microarch == "x86_64_v3"
    (tmp_path / "no-config.toml").write_text('selector = "cpu"\n')
    backend.make_plan({"selector": "cpu"})
    assert _events(trace)[2:] == ["plan-computed"] * 3


def test_a_plan_file_others_can_write_is_never_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("HVD_SELECTOR_TRACE", str(trace))
    backend.make_plan({"selector": "cpu"})
    (stored,) = (tmp_path / "cache" / "plans").glob("*.json")
    stored.chmod(0o666)
    backend.make_plan({"selector": "cpu"})
    stored.write_text("{not json")
    backend.make_plan({"selector": "cpu"})
    assert _events(trace) == ["plan-computed"] * 3


REWRITES = [
    ("import packaging", "from selector_backend._vendor import packaging"),
    ("import packaging as p", "import selector_backend._vendor.packaging as p"),
    (
        "import packaging.version",
        'from selector_backend._vendor import packaging; __import__("selector_backend._vendor.packaging.version")',
    ),
    ("import packaging.version as v", "import selector_backend._vendor.packaging.version as v"),
    ("from packaging import tags", "from selector_backend._vendor.packaging import tags"),
    (
        "from archspec.cpu import (\n    host,\n    TARGETS as T,\n)",
        "from selector_backend._vendor.archspec.cpu import host, TARGETS as T",
    ),
    ("import os, tomli, json", "import os; from selector_backend._vendor import tomli; import json"),
    (
        "def f():\n    if x: import tomli; y = 1",
        "def f():\n    if x: from selector_backend._vendor import tomli; y = 1",
    ),
    (
        's = "café"; from packaging.version import Version',
        's = "café"; from selector_backend._vendor.packaging.version import Version',
    ),
    ("from . import _structures\nimport packagingx\nfrom os import path", None),  # relative, other names: as they were
    ('"""from packaging import tags"""', None),  # text is not an import
]


@pytest.mark.parametrize(("source", "rewritten"), REWRITES)
def test_vendored_imports_are_rewritten_to_bind_what_they_bound(source: str, rewritten: str | None) -> None:
    from selector_backend.install.sdist import rewrite_imports

    assert rewrite_imports(source.encode()).decode() == (source if rewritten is None else rewritten)


def test_sdist_carries_its_backend_imports_and_needs_no_build_requirements(tmp_path: Path) -> None:
    """The published sdist's build env installs nothing: archspec, packaging and tomli ride in _vendor,
    their imports rewritten to selector_backend._vendor; nobody's sys.path changes."""
    import ast
    import subprocess
    import sys

    from selector_backend.files.tomlfile import load_toml
    from selector_backend.vendored import VENDORED

    pytest.importorskip("scikit_build_core")
    name = backend.build_sdist(str(tmp_path), {})
    with tarfile.open(tmp_path / name) as sdist:
        sdist.extractall(tmp_path / "src", filter="data")
    (src,) = (tmp_path / "src").iterdir()
    pyproject = load_toml(src / "pyproject.toml").data
    requires = pyproject["build-system"]["requires"]
    assert requires == []  # not even a marker-only entry: pip would start a pip subprocess for it
    assert (src / "selector_backend" / "_vendor" / "tomli" / "__init__.py").is_file()
    vendor = src / "selector_backend" / "_vendor"
    assert (vendor / "archspec" / "__init__.py").is_file() and (vendor / "packaging" / "tags.py").is_file()
    assert not [p for p in vendor.rglob("*") if p.suffix in (".so", ".pyd")]  # pure Python only
    licences = {p.name for p in (vendor / "LICENSES").rglob("*") if p.is_file()}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= licences and "LICENSE.BSD" in licences
    # No copy imports another by its own top-level name: every such import is rewritten.
    for path in vendor.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            assert not {n.split(".")[0] for n in names} & set(VENDORED), f"{path}:{node.lineno}"
    # Without site-packages (-S -s -E) every module of the copies imports, the backend's lookup finds them,
    # archspec detects this CPU, the bare names stay unimportable (nothing was added to sys.path) and the
    # metadata hook runs.
    probe = (
        "import importlib, importlib.util, pkgutil, selector_backend._vendor as v\n"
        "for m in pkgutil.walk_packages(v.__path__, v.__name__ + '.'):\n"
        "    m.name.endswith('__main__') or importlib.import_module(m.name)\n"
        "from selector_backend.vendored import import_module\n"
        "cpu, tags = import_module('archspec.cpu'), import_module('packaging.tags')\n"
        "print(cpu.__file__, tags.__file__, cpu.host().name)\n"
        "print([n for n in ('archspec', 'packaging', 'tomli') if importlib.util.find_spec(n)])\n"
        "from selector_backend.install import backend\n"  # the hooks' own imports come from the copies too
        f"print(backend.prepare_metadata_for_build_wheel({str(tmp_path)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-S", "-s", "-E", "-c", probe], cwd=src, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found, bare, metadata = done.stdout.splitlines()
    arch_file, pkg_file, host = found.split()
    assert arch_file.startswith(str(vendor)) and pkg_file.startswith(str(vendor)) and host
    assert bare == "[]" and (tmp_path / metadata / "METADATA").is_file()
    # A source build's wheel leaves _vendor out (the wheel depends on archspec and packaging).
    assert "selector_backend/_vendor/**" in pyproject["tool"]["scikit-build"]["wheel"]["exclude"]
