"""``doctor`` from a source checkout: what it reports about a build, with recorded NVML answers for the GPUs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import load_catalog

from .engine_helpers import NVML, ROOT, Cli, clean_env


def build_record(tmp_path: Path, variant: str) -> Path:
    catalog = load_catalog()
    path = tmp_path / "variant.json"
    path.write_text(variant_json.dumps(catalog.parse_variant(variant, fill_defaults=True), catalog))
    return path


def test_a_cpu_build_on_a_gpu_host_is_flagged_with_the_gpu_build_that_fits(cli: Cli, tmp_path: Path) -> None:
    """It runs (exit 0), but not "ok": the GTX 1080's GPU build and the command that asks for it."""
    record = build_record(tmp_path, "target=x86_64 tensor_ops=gloo controllers=gloo")
    replay = {"HVD_SELECTOR_NVML_REPLAY": str(NVML / "gtx1080.json"), "HVD_SELECTOR_TARGET": "skylake"}
    result = cli("doctor", "--variant-json", str(record), env=replay)
    assert result.rc == 0, result
    assert "ok:" not in result.out, result.out
    # issue 39: what the build contains, in the words of build-info (no Gloo library is linked)
    assert "  contains: tensor operations and controller: TCP (the gloo controller; no Gloo library)" in result.out
    assert "warning: this host has NVIDIA GPUs (1x NVIDIA GeForce GTX 1080 (6.1)) and the installed build is a CPU" in (
        result.out
    )
    assert "the GPU build for this machine is target=x86_64_v3 cuda=12 cuda_arch=61 tensor_ops=nccl" in result.out
    reinstall = f"{sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir"
    assert f"for the GPU build: {reinstall} -C selector=gpu-nvidia hvd-selector" in result.out
    report = json.loads(cli("doctor", "--json", "--variant-json", str(record), env=replay).out)
    assert report["runs_here"] is True and report["fix"] == []
    assert report["installed"]["contains"].endswith("TCP (the gloo controller; no Gloo library)")
    assert report["cpu_build_on_gpu_host"]["gpu_build"].startswith("target=x86_64_v3 cuda=12 cuda_arch=61")
    # the user asked for a CPU build: nothing to flag
    chosen = cli("doctor", "--variant-json", str(record), "--selector", "cpu", env=replay)
    assert chosen.rc == 0 and "ok: the installed build runs on this machine" in chosen.out, chosen.out


def test_a_build_that_does_not_run_gets_a_fix_per_problem(cli: Cli, tmp_path: Path) -> None:
    """An x86_64_v4 build on a Haswell (forced), a cuda=12 build with no NVIDIA NCCL wheel of its line."""
    from selector_backend.detect.libraries import installed_wheels

    record = build_record(tmp_path, "target=x86_64_v4 cuda=12 cuda_arch=90 tensor_ops=nccl")
    env = {"HVD_SELECTOR_NVML_REPLAY": str(NVML / "h100.json"), "HVD_SELECTOR_TARGET": "haswell"}
    result = cli("doctor", "--variant-json", str(record), "-C", "nccl=none", env=env)
    assert result.rc == 3, result
    fixes = [line.removeprefix("fix: ") for line in result.out.splitlines() if line.startswith("fix: ")]
    python = sys.executable
    expected = [
        f"{python} -m pip install --force-reinstall --no-deps --no-cache-dir hvd-selector",
        f"{python} -m pip install 'hvd-selector[gpu-nvidia-cu12]'",
    ]
    if "nvidia-nccl-cu13" in installed_wheels():  # this environment's (the test suite installs it): another line
        expected.append(f"{python} -m pip uninstall -y nvidia-nccl-cu13")
    assert fixes == expected, result.out


def test_a_cuda_build_on_a_host_without_a_gpu_gets_the_reinstall_alone(cli: Cli, tmp_path: Path) -> None:
    """The build a cache carried from a GPU host: each reason once, and no NCCL extra for a build that goes."""
    record = build_record(tmp_path, "target=x86_64_v3 cuda=12 cuda_arch=90 tensor_ops=nccl")
    env = {"HVD_SELECTOR_GPUS": "none", "HVD_SELECTOR_CUDA_DRIVER": "none", "HVD_SELECTOR_TARGET": "haswell"}
    result = cli("doctor", "--variant-json", str(record), "-C", "nccl=none", env=env)
    assert result.rc == 3, result
    lines = result.out.splitlines()
    assert len(lines) == len(set(lines)), result.out
    fixes = [line.removeprefix("fix: ") for line in lines if line.startswith("fix: ")]
    assert fixes == [f"{sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir hvd-selector"]


def spack_like_install(prefix: Path, spack: bool) -> Path:
    """This tree's selector_backend as an installed copy under ``prefix``'s site-packages, with its
    dist-info; ``spack`` adds the metadata every Spack install prefix holds (``.spack/spec.json``)."""
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    shutil.copytree(ROOT / "selector_backend", site / "selector_backend", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "variants", site / "selector_backend" / "variants")
    dist_info = site / "hvd_selector-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "INSTALLER").write_text("pip\n")
    if spack:
        (prefix / ".spack").mkdir()
        (prefix / ".spack" / "spec.json").write_text('{"spec": {"_meta": {"version": 5}, "nodes": []}}\n')
    return site


@pytest.mark.parametrize("spack", [True, False])
def test_a_spack_install_is_repaired_with_spack_install(tmp_path: Path, spack: bool) -> None:
    """Issue 39: a copy inside a Spack prefix gets a ``spack install`` spec as its fix, never a pip
    command that would write into Spack's prefix; any other copy keeps pip's."""
    site = spack_like_install(tmp_path / "prefix", spack)
    record = build_record(tmp_path, "target=x86_64_v4 tensor_ops=gloo controllers=gloo")
    env = clean_env(tmp_path, {"HVD_SELECTOR_TARGET": "haswell", "PYTHONPATH": str(site)})
    argv = [sys.executable, "-m", "selector_backend", "doctor", "--variant-json", str(record)]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    fixes = [line.removeprefix("fix: ") for line in proc.stdout.splitlines() if line.startswith("fix: ")]
    if spack:
        # the spec `hvd-selector spack spec` gives for this machine, at the installed version
        spec = subprocess.run(
            [*argv[:3], "spack", "spec", "--version", "0.1.0"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert spec.returncode == 0, spec.stderr
        assert spec.stdout.startswith("py-hvd-selector@0.1.0 ~cuda "), spec.stdout
        assert fixes == [f"spack install {spec.stdout.strip()}"], proc.stdout
        assert "pip" not in proc.stdout, proc.stdout
        assert "recorded no variant index" not in proc.stdout
    else:
        pip = f"{sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir"
        assert fixes == [f"{pip} hvd-selector==0.1.0"]
