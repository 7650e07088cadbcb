"""``hvd-selector[gpu-nvidia]`` brings the NCCL of the build chosen on the installing host (issue 41, item 5).

The extra pins ``hvd-selector-nccl``, an sdist whose backend makes hvd-selector's own plan and requires the
NCCL wheel of the chosen build's CUDA line. Real pip and uv 0.13.9 in fresh venvs, against the whole prebuilt
matrix as small installable wheels plus the sdist and the release's companions, published as a release is and
served on 127.0.0.1; the GPU is recorded NVML answers (an H100 on a CUDA 13.0 driver). NCCL is the real
``nvidia-nccl-cu13`` wheel, downloaded once per machine into ``build/`` (about 300 MB; pip's cache serves
later downloads), and every other dependency comes from a local wheelhouse.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from devtools.venvs import make_venv, shared_wheelhouse
from selector_backend.engine import variant_json
from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.variant import Variant
from selector_backend.publishing.publish import build_sdist
from tests.ci.test_publish import publish_matrix

from .backend_helpers import REPO, RUNTIME_DEPS, clean_env, nccl_wheelhouse, publish_index

pytestmark = pytest.mark.slow
NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"
UV = shutil.which("uv")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The release on a loopback index: every prebuilt variant, the sdist, the companions; its URL."""
    catalog = load_catalog()
    base = tmp_path_factory.mktemp("nccl-extra")
    site = publish_matrix(base, catalog, f"cp{sys.version_info.major}{sys.version_info.minor}", guard=True)
    with serve(site) as server:
        url = f"{server.url}/simple"
        publish_index(site, [], build_sdist(REPO, base / "sdist", url, env=clean_env()))
        yield url


@pytest.fixture(scope="module")
def wheelhouse(run_tmp_path: Path) -> list[str]:
    """--find-links for hvd-selector's runtime dependencies and the real nvidia-nccl-cu13 wheel."""
    deps = shared_wheelhouse(run_tmp_path, RUNTIME_DEPS)
    return ["--find-links", str(deps), "--find-links", str(nccl_wheelhouse())]


def install(installer: str, index: str, wheelhouse: list[str], tmp_path: Path, **env: str) -> dict[str, str]:
    """``{installer} install hvd-selector[gpu-nvidia]`` into a fresh venv; the distributions it holds then."""
    bindir = make_venv(tmp_path / "venv")
    python = str(bindir / "python")
    if installer == "pip":
        argv = [python, "-m", "pip", "install", "--no-cache-dir", "--index-url", index]
    else:
        argv = [str(UV), "pip", "install", "--python", python, "--index-url", index, "--no-cache"]
    done = subprocess.run(
        [*argv, *wheelhouse, "hvd-selector[gpu-nvidia]"],
        env=clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"), HVD_SELECTOR_TARGET="x86_64_v3", **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    listed = subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True)
    return {d["name"].lower(): d["version"] for d in json.loads(listed.stdout)}


def installed_build(tmp_path: Path) -> Variant:
    """The build hvd-selector installed, as its import guard's record gives it."""
    record = next((tmp_path / "venv" / "lib").glob("python*/site-packages/hvd_selector/variant.json"))
    return variant_json.parse(record.read_text(), load_catalog(), source=str(record))[1]


@pytest.mark.parametrize("installer", ["pip", pytest.param("uv", marks=pytest.mark.skipif(UV is None, reason="no uv"))])
def test_gpu_nvidia_brings_the_nccl_of_the_cuda13_build_chosen_here(
    installer: str, index: str, wheelhouse: list[str], tmp_path: Path
) -> None:
    have = install(installer, index, wheelhouse, tmp_path, HVD_SELECTOR_NVML_REPLAY=str(NVML / "h100_cuda13.json"))
    build = installed_build(tmp_path)
    assert build["cuda"] == "13" and build["tensor_ops"] == "nccl", build
    assert "nvidia-nccl-cu13" in have and "hvd-selector-nccl" in have, have
    assert "nvidia-nccl-cu12" not in have, have


def test_gpu_nvidia_on_a_host_without_a_gpu_brings_no_nccl(index: str, wheelhouse: list[str], tmp_path: Path) -> None:
    have = install("pip", index, wheelhouse, tmp_path, HVD_SELECTOR_NVML_REPLAY=str(NVML / "driver_not_loaded.json"))
    assert installed_build(tmp_path)["cuda"] == "none"
    assert "hvd-selector-nccl" in have, "the extra's companion decided (and found nothing to add)"
    assert not [name for name in have if name.startswith("nvidia-nccl")], have
