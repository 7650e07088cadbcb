"""hvd-selector-horovod (compat/horovod/): ``import horovod.torch as hvd`` in real venvs.

The compat wheel is built from the repository with pip and installed into
fresh venvs (with the system site-packages, for torch; hvd_selector is the
gloo build on PYTHONPATH). A "real Horovod" is a tiny distribution named
horovod, built and installed the same way: with it present, in either
install order, nothing of ours answers ``import horovod``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import native_builds
from devtools.venvs import make_venv, user_env
from selector_backend.files.tomlfile import load_toml
from tests.installed import require

require("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "compat" / "horovod"

PROBE = """
import json, horovod
out = {"version": horovod.__version__, "doc": (horovod.__doc__ or "").splitlines()[0]}
import horovod.torch as hvd
out["name"] = hvd.__name__
out["real"] = getattr(horovod, "REAL", False)
if not out["real"]:
    import hvd_selector.torch
    from horovod.torch.mpi_ops import allreduce
    from horovod.torch import SyncBatchNorm, DistributedOptimizer
    out["same"] = hvd is hvd_selector.torch and allreduce is hvd_selector.torch.allreduce
    out["spec"] = hvd.__spec__.name
    from horovod.torch.elastic import TorchState, run as elastic_run
    out["elastic"] = TorchState is hvd.elastic.TorchState and elastic_run is hvd.elastic.run
    hvd.init()
    import torch
    out["sum"] = hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist()
    try:
        hvd.allreduce(torch.ones(3), op=hvd.Adasum)
    except NotImplementedError as exc:
        out["adasum"] = str(exc)
    try:
        import horovod.tensorflow
    except ModuleNotFoundError as exc:
        out["tensorflow"] = str(exc)
    hvd.shutdown()
print(json.dumps(out))
"""


def _wheel(project: Path, out: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-w", str(out)]
    proc = subprocess.run([*argv, str(project)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def _real_horovod(tmp: Path) -> Path:
    """A distribution named horovod that is not ours (its horovod.torch is a marker)."""
    src = tmp / "real-horovod"
    (src / "horovod" / "torch").mkdir(parents=True)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "horovod"\nversion = "0.28.1"\n'
        '[tool.setuptools]\npackages = ["horovod", "horovod.torch"]\n'
    )
    (src / "horovod" / "__init__.py").write_text('"""Horovod itself."""\n__version__ = "0.28.1"\nREAL = True\n')
    (src / "horovod" / "torch" / "__init__.py").write_text("")
    return _wheel(src, tmp / "real-dist")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compat")
    shutil.copytree(COMPAT, tmp / "compat")  # setuptools builds in the source tree: never in the repository's
    return {"compat": _wheel(tmp / "compat", tmp / "dist"), "real": _real_horovod(tmp)}


def _venv(path: Path, *wheels: Path) -> Path:
    python = make_venv(path, system_site_packages=True) / "python"
    for wheel in wheels:  # one by one: the order is part of what is tested
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
            capture_output=True,
            text=True,
            env=user_env(),
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    return python


def _probe(python: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    build = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO)
    env = user_env(PYTHONPATH=build.env()["PYTHONPATH"], HVD_SELECTOR_TIMEOUT="20")
    return subprocess.run([str(python), "-c", PROBE], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_without_horovod_the_opt_in_answers_with_hvd_selector(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv", wheels["compat"])
    proc = _probe(python, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    release = load_toml(REPO / "pyproject.toml").data["project"]["version"]
    assert out["version"] == f"0.28.1+hvdselector.{release}"  # PEP 440: compares as 0.28.1, names what it is
    assert "hvd-selector" in out["doc"]
    assert out["name"] == out["spec"] == "hvd_selector.torch" and out["same"] is True
    assert out["elastic"] is True  # horovod.torch.elastic and hvd.elastic are hvd_selector.torch.elastic
    assert out["sum"] == [1.0, 1.0, 1.0]
    assert out["adasum"] and "\n" not in out["adasum"] and "Adasum" in out["adasum"]
    assert "horovod.tensorflow is not part of hvd-selector's Horovod layer" in out["tensorflow"]


@pytest.mark.parametrize("order", ["real first", "compat first"])
def test_a_real_horovod_is_never_shadowed(wheels: dict[str, Path], order: str, tmp_path: Path) -> None:
    pair = [wheels["real"], wheels["compat"]]
    python = _venv(tmp_path / "venv", *(pair if order == "real first" else pair[::-1]))
    proc = _probe(python, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out == {"version": "0.28.1", "doc": "Horovod itself.", "name": "horovod.torch", "real": True}


def test_without_the_opt_in_there_is_no_horovod(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    proc = subprocess.run([str(python), "-c", "import horovod"], capture_output=True, text=True, env=user_env())
    assert proc.returncode == 1 and "No module named 'horovod'" in proc.stderr


def test_the_compat_distribution_is_released_with_hvd_selector() -> None:
    main = load_toml(REPO / "pyproject.toml").data["project"]
    compat = load_toml(COMPAT / "pyproject.toml").data["project"]
    assert compat["version"] == main["version"]
    assert compat["dependencies"] == [f"hvd-selector=={main['version']}"]
    assert main["optional-dependencies"]["horovod"] == [f"hvd-selector-horovod=={main['version']}"]
