"""The one rule on a GPU host no GPU build fits, on the uv installer paths (docs/guide/install.md's table).

A GTX 1080 (compute capability 6.1, driver CUDA 12.2: recorded NVML answers for the backend, uv's
``NV_VARIANT_PROVIDER_FORCE_*`` for uv's own provider) where the CUDA 12 toolkit is absent: every path
that runs the backend stops with exit 3 and the line naming ``-C selector=cpu``, on a terminal too (where
a CPU build used to be installed with a warning). The index is the whole prebuilt matrix as small wheels
with the real variant metadata (tests/ci/test_publish.py's ``publish_matrix``) plus the checkout's sdist,
served on 127.0.0.1; pip's paths are in test_pip_visibility.py.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from selector_backend.engine.catalog import load_catalog
from selector_backend.publishing.publish import build_sdist, publish
from tests.ci.test_publish import publish_matrix

from .backend_helpers import BUILD_DEPS, REPO, RUNTIME_DEPS, clean_env
from .test_pip_visibility import GTX1080, on_terminal, unwrapped

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed")
STOP = "not installing a CPU build on a host with NVIDIA GPUs unasked"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every prebuilt variant (small wheels) and the checkout's sdist on a loopback index; its URL."""
    from selector_backend.engine.variant import Variant
    from selector_backend.install.build import missing_toolchain

    catalog = load_catalog()
    gpu_build: Variant = catalog.parse_variant("target=x86_64 cuda=12 cuda_arch=61 tensor_ops=nccl", fill_defaults=True)
    if not missing_toolchain(gpu_build):
        pytest.skip("this machine can build the CUDA 12 source build, which auto then installs")
    base = tmp_path_factory.mktemp("gpu-rule")
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    site = publish_matrix(base, catalog, py)
    with serve(site) as server:
        url = f"{server.url}/simple"
        sdist = build_sdist(REPO, base / "sdist", url, env=clean_env())
        publish([], site, catalog, sdists=[sdist], progress=False)
        yield url


@pytest.fixture(scope="module")
def wheels(run_tmp_path: Path) -> Path:
    """Build and runtime requirements as local wheels (uv's isolated build and the tool's venv)."""
    from devtools.venvs import shared_wheelhouse

    return shared_wheelhouse(run_tmp_path, [*RUNTIME_DEPS, *BUILD_DEPS])


def gtx1080_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(
        TERM="dumb",
        HVD_SELECTOR_NVML_REPLAY=str(GTX1080),
        NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION="12.2",
        NV_VARIANT_PROVIDER_FORCE_SM_ARCH="6.1",
        UV_NO_CACHE="1",
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        **extra,
    )


def assert_stopped(rc: int, shown: str) -> None:
    shown = unwrapped(shown)
    assert rc != 0, shown
    assert "WARNING: this host has 1 NVIDIA GPU(s) [1x NVIDIA GeForce GTX 1080 (6.1)" in shown, shown
    assert STOP in shown and "-C selector=cpu (or HVD_SELECTOR=cpu)" in shown and "Traceback" not in shown, shown


def uv_pip(tmp_path: Path, url: str, *extra: str) -> list[str]:
    target = tmp_path / "site"
    argv = [str(UV), "pip", "install", "--python", sys.executable, "--target", str(target), "--no-deps"]
    return [*argv, "--no-build-isolation", "--index-url", url, *extra, "hvd-selector"]


def installed(tmp_path: Path) -> list[str]:
    return [p.name for p in (tmp_path / "site").glob("*") if p.name != ".lock"]  # uv leaves its lock file


def test_uv_variants_preview_without_a_binary_stops_on_a_terminal(index: str, tmp_path: Path) -> None:
    """The documented uv-preview path on a GPU host: ``--no-binary hvd-selector`` makes uv run the backend."""
    argv = uv_pip(tmp_path, index, "--preview-features", "wheel-variants", "--no-binary", "hvd-selector")
    rc, shown, _ = on_terminal(argv, gtx1080_env(tmp_path))
    assert_stopped(rc, shown)
    assert installed(tmp_path) == []
    # the way out the line names: the backend picks the CPU prebuilt
    _, shown, _ = on_terminal(argv, gtx1080_env(tmp_path, HVD_SELECTOR="cpu"))
    assert_cpu_prebuilt(shown)


def test_uv_variants_preview_native_pick_follows_the_rule(index: str, tmp_path: Path) -> None:
    """uv's own pick: no GPU wheel fits a GTX 1080, and every CPU wheel carries ``hvd_selector :: nvidia_gpu ::
    unused``, which uv cannot judge, so uv builds the sdist and the backend applies the rule."""
    argv = uv_pip(tmp_path, index, "--preview-features", "wheel-variants")
    rc, shown, _ = on_terminal(argv, gtx1080_env(tmp_path))
    assert_stopped(rc, shown)
    assert installed(tmp_path) == []
    _, shown, _ = on_terminal(argv, gtx1080_env(tmp_path, HVD_SELECTOR="cpu"))  # asked for: the CPU prebuilt
    assert_cpu_prebuilt(shown)


def test_uv_variants_preview_leaves_a_cpu_host_to_the_backend(index: str, tmp_path: Path) -> None:
    """The rule's cost: on a host without NVIDIA GPUs uv cannot pick a CPU wheel either. It builds the sdist and
    the backend picks the CPU prebuilt; with ``--no-build`` uv finds nothing (docs/guide/wheel-variants.md)."""
    env = clean_env(
        TERM="dumb",
        HVD_SELECTOR_GPUS="none",
        HVD_SELECTOR_CUDA_DRIVER="none",
        UV_NO_CACHE="1",
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
    )
    argv = uv_pip(tmp_path, index, "--preview-features", "wheel-variants")
    _, shown, _ = on_terminal(argv, env)
    assert_cpu_prebuilt(shown)
    rc, shown, _ = on_terminal([*argv, "--no-build"], env)
    assert rc != 0 and "has no usable wheels" in unwrapped(shown), shown
    assert installed(tmp_path) == []


def assert_cpu_prebuilt(shown: str) -> None:
    """The backend ran and picked the CPU prebuilt (this index's small wheels stop short of an install: they
    carry no import-guard record; tests/backend/test_e2e_pip.py installs real ones)."""
    shown = unwrapped(shown)
    assert STOP not in shown and "selected prebuilt target=x86_64" in shown and "cuda=none" in shown, shown


def test_uv_tool_install_stops_on_a_terminal(index: str, wheels: Path, tmp_path: Path) -> None:
    env = gtx1080_env(tmp_path, UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"))
    argv = [str(UV), "tool", "install", "--python", sys.executable, "--index-url", index]
    rc, shown, _ = on_terminal([*argv, "--find-links", str(wheels), "hvd-selector"], env)
    assert_stopped(rc, shown)
    assert not (tmp_path / "bin").exists() or not any((tmp_path / "bin").iterdir())


def test_uv_sync_stops_on_a_terminal(index: str, wheels: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()  # requires-python of this interpreter's line: uv locks for every Python it allows
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "app"\nversion = "0"\nrequires-python = "=={sys.version_info.major}.'
        f'{sys.version_info.minor}.*"\ndependencies = ["hvd-selector"]\n'
    )
    argv = [str(UV), "sync", "--directory", str(project), "--python", sys.executable, "--index-url", index]
    rc, shown, _ = on_terminal([*argv, "--find-links", str(wheels)], gtx1080_env(tmp_path))
    assert_stopped(rc, shown)
    assert not list(project.glob(".venv/lib/python*/site-packages/hvd_selector"))
