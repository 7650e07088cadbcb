"""A native variant-aware installer picks our wheels by itself: uv with ``--preview-features wheel-variants``.

uv runs no Python provider; it evaluates the standard namespaces with providers
built into it (``x86_64 :: level``; ``nvidia :: ...``, whose GPU facts
``NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION`` / ``_SM_ARCH`` set on a
machine without a GPU) and treats our own namespace as unsupported. The index
is the whole prebuilt matrix published as small wheels that carry the real
variant metadata (building every GPU arch here would take hours); one real
built wheel goes through uv in tests/backend/test_e2e_pip.py. For each host
where a GPU wheel's standard properties describe how it runs, uv must install
a labelled wheel without building anything, the one ``hvd-selector resolve
--index-url`` ranks first among those wheels, and never one the engine calls
incompatible. Every CPU wheel carries ``hvd_selector :: nvidia_gpu :: unused``
(the one rule of docs/guide/install.md: no CPU build on a GPU host unasked), so
where no GPU wheel is described uv picks nothing from the labelled wheels and
``--no-build`` fails (without it uv builds the sdist and the backend decides:
tests/backend/test_gpu_host_rule.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from selector_backend.engine import compat, variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.publishing import publish

from ..backend.test_pip_visibility import unwrapped
from .test_publish import publish_matrix, serve

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed")
REPO = Path(__file__).resolve().parents[2]
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"

# (CUDA driver, GPU compute capability); None: no GPU
HOSTS = [(d, cc) for d in ("12.2", "12.9", "13.0") for cc in ("8.0", "9.0", "12.0")] + [None]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Path:
    """Every prebuilt variant as a small wheel for this Python, on a variant index published as a release is."""
    return publish_matrix(tmp_path_factory.mktemp("uv-variants"), catalog, PY)


def _engine_env(host: tuple[str, str] | None, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "NV_VARIANT", "UV_"))}
    env["PYTHONPATH"] = str(REPO)
    empty = site.parent / "config.toml"
    empty.touch()
    env["HVD_SELECTOR_CONFIG"] = str(empty)
    env["HVD_SELECTOR_GPUS"] = host[1] if host else "none"
    env["HVD_SELECTOR_CUDA_DRIVER"] = host[0] if host else "none"
    return env


def engine_ranking(url: str, host: tuple[str, str] | None, site: Path) -> list[dict[str, object]]:
    """The compatible wheels of this Python and platform, best first, as ``resolve --json`` lists them."""
    done = subprocess.run(
        [sys.executable, "-m", "selector_backend", "resolve", "--json", "--index-url", url],
        capture_output=True,
        text=True,
        env=_engine_env(host, site),
        cwd=REPO,
    )
    assert done.returncode in (0, 3), done.stderr
    return [c for c in json.loads(done.stdout)["candidates"] if c["compatible"]]


def described_here(candidate: dict[str, object], host: tuple[str, str] | None, catalog: Catalog) -> bool:
    """The wheel's standard properties alone say how it runs here: no property of our namespace, and a GPU
    build's ``sm_arch`` names the code (SASS or PTX) this host's GPU runs."""
    variant = catalog.parse_variant(candidate["variant"])  # type: ignore[arg-type]
    props = variant_json.properties(variant, catalog)
    if catalog.namespace in props:
        return False
    if variant["cuda"] == "none":
        return True
    assert host is not None
    code = compat.gpu_code(variant.values_of("cuda_arch"), host[1])
    assert code is not None
    kind, arch = code
    return f"{arch}_{'real' if kind == 'sass' else 'virtual'}" in props["nvidia"]["sm_arch"]


def uv_install(
    venv: Path, url: str, host: tuple[str, str] | None, *extra: str, requirement: str = "hvd-selector"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "NV_VARIANT", "UV_"))}
    if host is not None:
        env["NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION"], env["NV_VARIANT_PROVIDER_FORCE_SM_ARCH"] = host
    cmd = [UV, "pip", "install", "--preview-features", "wheel-variants", "--no-cache", "--no-build"]
    cmd += ["--python", str(venv / "bin" / "python"), "--index-url", url, "--reinstall", *extra, requirement]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)  # type: ignore[arg-type]


def installed_label(venv: Path) -> str:
    (dist_info,) = venv.glob("lib/python*/site-packages/hvd_selector-*.dist-info")
    return next(iter(json.loads((dist_info / "variant.json").read_text())["variants"]))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("uv-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: f"driver {h[0]} sm {h[1]}" if h else "no GPU")
def test_uv_installs_the_wheel_the_engine_ranks_first(
    host: tuple[str, str] | None, site: Path, venv: Path, catalog: Catalog
) -> None:
    with serve(site) as base:
        url = f"{base}/simple"
        done = uv_install(venv, url, host)
        ranked = engine_ranking(url, host, site)
    visible = [c for c in ranked if described_here(c, host, catalog)]
    if not visible:  # no GPU wheel is described here, and uv cannot tell whether a CPU build is wanted
        shown = unwrapped(done.stderr)  # uv wraps its message at 80 columns without a terminal
        assert done.returncode != 0 and "no wheels with a matching platform tag" in shown, done.stderr[-2000:]
        return
    assert done.returncode == 0, done.stderr[-2000:]
    label = installed_label(venv)
    by_label = {str(c["label"]): c for c in ranked}
    assert label in by_label, f"uv installed {label}, which the engine says cannot run here"
    assert by_label[label]["variant"]["cuda"] != "none"  # type: ignore[index]
    assert label == visible[0]["label"], f"uv chose {by_label[label]['variant']}, the engine {visible[0]['variant']}"
    if host is not None and host[1] in ("8.0", "9.0"):  # the GPU facts reached uv: a GPU build
        assert by_label[label]["variant"]["cuda"] != "none"  # type: ignore[index]


def test_uv_never_picks_a_build_our_namespace_governs(site: Path, venv: Path, tmp_path: Path, catalog: Catalog) -> None:
    """With only MPI builds on the index uv finds nothing (it cannot tell whether MPI is here)."""
    folder = publish.generation_dir(site, catalog)
    assert folder is not None
    wheels = folder.glob("*_x86_64-*.whl")
    mpi = [p for p in wheels if _namespaces(p) >= {catalog.namespace}]
    assert mpi
    only = tmp_path / "site"
    publish.publish(mpi, only, catalog, progress=False)
    with serve(only) as base:
        done = uv_install(venv, f"{base}/simple", None)
    assert done.returncode != 0 and "unsupported wheel variants" in unwrapped(done.stderr), done.stderr[-2000:]


def test_cpu_wheels_are_left_to_the_backend(site: Path, catalog: Catalog) -> None:
    """Every CPU wheel carries the property uv cannot judge; no GPU wheel does (uv installs those by itself)."""
    folder = publish.generation_dir(site, catalog)
    assert folder is not None
    wheels = list(folder.glob("*.whl"))
    assert wheels
    for wheel in wheels:
        props = _properties(wheel)
        cpu_build = "nvidia" not in props
        assert (props.get(catalog.namespace, {}).get("nvidia_gpu") == ["unused"]) == cpu_build, (wheel.name, props)


def _properties(wheel: Path) -> dict[str, dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/variant.json"))
        (props,) = json.loads(archive.read(name))["variants"].values()
    return dict(props)


def _namespaces(wheel: Path) -> set[str]:
    return set(_properties(wheel))


def test_a_pin_under_uvs_variants_preview_is_the_wheel_url_with_its_hash(
    site: Path, venv: Path, catalog: Catalog
) -> None:
    """uv runs no build backend for a labelled wheel, so ``-C variant-label`` cannot reach us there; the pin
    wheel-variants.md gives uv is the wheel's URL with its sha256. It holds against uv's own pick, and a
    wrong hash fails the install. It works for a build uv's own providers accept here (a GPU build with SASS
    for this GPU), not for a CPU build, whose property uv cannot judge ("only unsupported wheel variants")."""
    host = ("13.0", "9.0")
    with serve(site) as base:
        url = f"{base}/simple"
        assert uv_install(venv, url, host).returncode == 0
        native = installed_label(venv)
        # another build uv can install here: one with SASS for this GPU (the CUDA 12 sm_90 build)
        ranked = engine_ranking(url, host, site)
        other = [c for c in ranked if c["label"] != native and _sass_for(c, host[1], catalog)]
        label = str(other[0]["label"])
        (pinned,) = other[0]["files"][:1]  # type: ignore[index]
        wheel_url, sha256 = pinned["url"], pinned["sha256"]
        pin = f"hvd-selector @ {wheel_url}#sha256={sha256}"
        done = uv_install(venv, url, host, requirement=pin)
        assert done.returncode == 0, done.stderr[-2000:]
        assert installed_label(venv) == label != native
        tampered = f"hvd-selector @ {wheel_url}#sha256={'0' * 64}"
        done = uv_install(venv, url, host, requirement=tampered)
        assert done.returncode != 0 and "hash" in done.stderr.lower(), done.stderr[-2000:]
        assert installed_label(venv) == label
        cpu = next(c for c in ranked if c["variant"]["cuda"] == "none")  # type: ignore[index]
        done = uv_install(venv, url, host, requirement=f"hvd-selector @ {cpu['files'][0]['url']}")  # type: ignore[index]
    assert done.returncode != 0 and "only unsupported wheel variants" in unwrapped(done.stderr), done.stderr[-2000:]


def _sass_for(candidate: dict[str, object], capability: str, catalog: Catalog) -> bool:
    """The build carries SASS for a GPU of this compute capability (its ``nvidia :: sm_arch`` says so)."""
    props = variant_json.properties(catalog.parse_variant(candidate["variant"]), catalog)  # type: ignore[arg-type]
    return f"{capability.replace('.', '')}_real" in props.get("nvidia", {}).get("sm_arch", [])
