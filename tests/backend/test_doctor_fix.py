"""From an installed copy: ``doctor``'s printed fix, run exactly as printed, repairs a wrong install.

Stock pip, fresh venvs, the session's loopback variant index (conftest.py). A
wrong install is made the way users get one: pip's wheel cache, keyed by the
sdist alone, hands a second machine the wheel built for the first. Marked slow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .backend_helpers import VariantIndex, clean_env, nccl_wheelhouse, run, venv_with_dependencies

pytestmark = pytest.mark.slow


def pip_install_cached(bindir: Path, index: VariantIndex, env: dict[str, str]) -> None:
    """A plain install that uses pip's wheel cache (no --no-cache-dir), into a venv that already holds
    the dependencies (backend_helpers.venv_with_dependencies; the wheelhouse would have them too)."""
    pip = [str(bindir / "python"), "-m", "pip", "install", "--find-links", str(index.wheelhouse)]
    run([*pip, "--extra-index-url", index.url, "hvd-selector"], env=env)


def doctor(bindir: Path, env: dict[str, str], *args: str) -> tuple[int, str, dict[str, object]]:
    text = run([str(bindir / "hvd-selector"), "doctor", *args], env=env, check=False)
    report = run([str(bindir / "hvd-selector"), "doctor", "--json", *args], env=env, check=False)
    return text.returncode, text.stdout + text.stderr, json.loads(report.stdout)


def fixes(output: str) -> list[str]:
    return [line.removeprefix("fix: ") for line in output.splitlines() if line.startswith("fix: ")]


def test_doctors_fix_as_printed_replaces_a_cached_wheel_of_another_cpu(
    variant_index: VariantIndex, tmp_path: Path
) -> None:
    pip_cache = str(tmp_path / "pip-cache")
    first = clean_env(PIP_CACHE_DIR=pip_cache, HVD_SELECTOR_TARGET="x86_64_v4")
    pip_install_cached(venv_with_dependencies(tmp_path / "first", variant_index), variant_index, first)
    # a host forced lower, as a second machine of the fleet: pip hands it the cached x86_64_v4 wheel
    here = clean_env(PIP_CACHE_DIR=pip_cache, HVD_SELECTOR_TARGET="x86_64_v3")
    bindir = venv_with_dependencies(tmp_path / "second", variant_index)
    pip_install_cached(bindir, variant_index, here)
    rc, output, report = doctor(bindir, here)
    assert rc == 3 and "problem: the installed build does not run on this machine" in output, output
    assert report["installed"]["variant"]["target"] == "x86_64_v4"  # type: ignore[index]
    (command,) = fixes(output)
    assert report["fix"] == [command]
    # this venv's own pip, the recorded index (from the sdist), the installed version; nothing to add by hand
    assert command.startswith(f"{bindir / 'python'} -m pip install --force-reinstall --no-deps --no-cache-dir")
    assert f"--extra-index-url {variant_index.url}" in command and command.endswith("hvd-selector==0.1.0")
    run(["bash", "-c", command], env=here)
    rc, output, report = doctor(bindir, here)
    assert rc == 0 and "ok: the installed build runs on this machine" in output, output
    assert report["installed"]["variant"]["target"] == "x86_64_v3"  # type: ignore[index]
    # the installed copy knows its index: resolve ranks it without being told
    resolved = json.loads(run([str(bindir / "hvd-selector"), "resolve", "--json"], env=here).stdout)
    assert resolved["selected"]["source"] == "index" and resolved["selected"]["index"] == variant_index.url


def test_doctors_fix_as_printed_installs_the_missing_nccl(
    variant_index: VariantIndex, tmp_path: Path, nccl_wheel: Path
) -> None:
    """A cuda=13 NCCL build (its variant.json; no GPU build is compiled here) on an H100 (recorded
    NVML answers; driver 580, CUDA 13.0) with no NCCL: the fix installs the extra that brings
    nvidia-nccl-cu13, into this environment."""
    from selector_backend.engine import variant_json
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    record = tmp_path / "variant.json"
    gpu_build = catalog.parse_variant("target=x86_64_v3 cuda=13 cuda_arch=90 tensor_ops=nccl", fill_defaults=True)
    record.write_text(variant_json.dumps(gpu_build, catalog))
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    env = clean_env(HVD_SELECTOR_TARGET="x86_64_v3", HVD_SELECTOR_CACHE_DIR=str(tmp_path / "cache"))
    pip_install_cached(bindir, variant_index, env)
    h100 = {
        **env,
        "HVD_SELECTOR_NVML_REPLAY": str(Path(__file__).resolve().parents[1] / "data" / "nvml" / "h100.json"),
        "HVD_SELECTOR_CUDA_DRIVER": "13.0",
        "HVD_SELECTOR_NCCL": "none",  # not a system NCCL this machine may have: the environment's wheel only
    }
    rc, output, _ = doctor(bindir, h100, "--variant-json", str(record))
    assert rc == 3 and "needs nvidia-nccl-cu13 (the [gpu-nvidia-cu13] extra)" in output, output
    (command,) = fixes(output)
    assert command == f"{bindir / 'python'} -m pip install 'hvd-selector[gpu-nvidia-cu13]==0.1.0'"
    # as printed; pip's own settings say where packages come from (this test has no network to rely on)
    run(["bash", "-c", command], env={**h100, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(nccl_wheel.parent)})
    rc, output, _ = doctor(bindir, h100, "--variant-json", str(record))
    assert rc == 0 and "ok: the installed build runs on this machine" in output, output


@pytest.fixture(scope="module")
def nccl_wheel() -> Path:
    """The nvidia-nccl-cu13 wheel (the test suite's own requirement), shared with test_nccl_extra."""
    (wheel,) = nccl_wheelhouse().glob("nvidia_nccl_cu13-*.whl")
    assert re.match(r"nvidia_nccl_cu13-[\d.]+-", wheel.name)
    return wheel
