"""hvd-selector-nccl, the companion the ``[gpu-nvidia]`` extra pins: how it is made, and what its backend answers.

Its backend is driven as pip drives it (``pyproject_hooks``, a fresh process in the unpacked sdist), with a
requested variant so that no index is needed; ``tests/backend/test_nccl_extra.py`` installs it with real pip
and uv from a loopback index.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from pyproject_hooks import BuildBackendHookCaller

from devtools.venvs import user_env
from selector_backend.files.tomlfile import load_toml
from selector_backend.publishing.nccl_companion import nccl_companion_sdist
from selector_backend.publishing.publish import build_sdist

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sdists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(hvd-selector's sdist, the companion made from it)."""
    base = tmp_path_factory.mktemp("nccl-companion")
    sdist = build_sdist(ROOT, base / "sdist", "http://127.0.0.1:9/simple", env=user_env())
    companion = nccl_companion_sdist(sdist, base / "companion")
    assert companion is not None
    return sdist, companion


def test_the_extra_pins_the_companion_of_the_release() -> None:
    main = load_toml(ROOT / "pyproject.toml").data["project"]
    assert main["optional-dependencies"]["gpu-nvidia"] == [f"hvd-selector-nccl=={main['version']}"]


def test_the_companion_carries_the_backend_catalog_and_index_and_nothing_native(
    sdists: tuple[Path, Path], tmp_path: Path
) -> None:
    sdist, companion = sdists
    assert companion.name == "hvd_selector_nccl-0.1.0.tar.gz"
    with tarfile.open(companion) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
        pkg_info = tar.extractfile("hvd_selector_nccl-0.1.0/PKG-INFO").read().decode()  # type: ignore[union-attr]
        tar.extractall(tmp_path, filter="data")
    assert {
        "pyproject.toml",
        "PKG-INFO",
        "variants/catalog.toml",
        "selector_backend/install/nccl_companion.py",
    } <= names
    assert any(n.startswith("selector_backend/_vendor/packaging/") for n in names), "no build requirements needed"
    assert not [n for n in names if n.startswith(("native/", "hvd_selector/"))]
    assert "Dynamic: Requires-Dist" in pkg_info
    data = load_toml(tmp_path / "hvd_selector_nccl-0.1.0" / "pyproject.toml").data
    assert data["build-system"] == {
        "requires": [],
        "build-backend": "selector_backend.install.nccl_companion",
        "backend-path": ["."],
    }
    assert data["tool"]["hvd-selector"]["index-url"] == ["http://127.0.0.1:9/simple"]
    main = load_toml(ROOT / "pyproject.toml").data["project"]["optional-dependencies"]
    assert data["tool"]["hvd-selector-nccl"]["extras"] == {e: main[e] for e in ("gpu-nvidia-cu12", "gpu-nvidia-cu13")}
    # made again from the same sdist: the same bytes (a re-run publish is a no-op)
    again = nccl_companion_sdist(sdist, tmp_path / "again")
    assert again is not None and again.read_bytes() == companion.read_bytes()


@pytest.mark.parametrize(
    ("variant", "needs"),
    [
        ("target=x86_64 cuda=12 cuda_arch=80 tensor_ops=nccl", ["nvidia-nccl-cu12>=2.21"]),
        ("target=x86_64 cuda=13 cuda_arch=90 tensor_ops=nccl", ["nvidia-nccl-cu13>=2.27"]),
        ("target=x86_64 tensor_ops=gloo", []),
    ],
)
def test_the_companion_requires_the_nccl_of_the_build_hvd_selector_chooses(
    sdists: tuple[Path, Path], tmp_path: Path, variant: str, needs: list[str]
) -> None:
    with tarfile.open(sdists[1]) as tar:
        tar.extractall(tmp_path, filter="data")
    tree = tmp_path / "hvd_selector_nccl-0.1.0"
    hooks = BuildBackendHookCaller(str(tree), "selector_backend.install.nccl_companion", backend_path=["."])
    settings = {"variant": variant, "cache-dir": str(tmp_path / "cache")}
    env = user_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    with hooks.subprocess_runner(
        lambda cmd, cwd=None, extra_environ=None: _run(cmd, cwd, {**env, **(extra_environ or {})})
    ):
        dist_info = hooks.prepare_metadata_for_build_wheel(str(tmp_path / "md"), settings)
        wheel = hooks.build_wheel(str(tmp_path / "wheel"), settings)
    metadata = (tmp_path / "md" / dist_info / "METADATA").read_text()
    assert dist_info == "hvd_selector_nccl-0.1.0.dist-info"
    assert [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist")] == needs
    assert wheel == "hvd_selector_nccl-0.1.0-py3-none-any.whl"


def _run(cmd: list[str], cwd: str | None, env: dict[str, str]) -> None:
    import subprocess

    subprocess.run(cmd, cwd=cwd, env=env, check=True, timeout=120)
