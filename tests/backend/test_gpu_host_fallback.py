"""What ``auto`` installs on a GPU host no GPU prebuilt fits (DESIGN: never silently a CPU build): the GPU
source build when the CUDA toolchain is here, else nothing: the install stops (exit 3), terminal or not,
until the CPU build is asked for (docs/guide/install.md's table; test_pip_visibility.py runs real pip/uv)."""

from __future__ import annotations

import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import resolve
from selector_backend.engine.sources import catalog_matrix
from selector_backend.errors import NothingFitsError
from selector_backend.install import backend
from selector_backend.install.build import missing_toolchain

# GTX 1080 (compute capability 6.1, NVIDIA's CUDA GPUs page) on the 535 driver (CUDA 12.2)
GTX1080 = {"cpu": {"microarch": "skylake"}, "gpus": [{"compute_capability": "6.1"}], "cuda_driver": "12.2"}


def _resolution(selector: str = "auto"):  # type: ignore[no-untyped-def]
    catalog = load_catalog()
    host = HostProfile.from_json(GTX1080)
    return resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector(selector, catalog))


def test_auto_builds_the_gpu_source_build_when_the_toolchain_is_here(capsys: pytest.CaptureFixture[str]) -> None:
    resolution = _resolution()
    assert resolution.selected.variant["cuda"] == "none"
    if missing_toolchain(resolution.source_build):
        pytest.skip(f"no CUDA toolchain here: {missing_toolchain(resolution.source_build)}")
    chosen = backend._gpu_host_fallback(resolution, None, cpu_prebuilt=True)
    assert chosen is not None and chosen["cuda"] == "12" and chosen["cuda_arch"] == ("61",)
    err = capsys.readouterr().err
    assert "WARNING: this host has 1 NVIDIA GPU(s)" in err and "building the GPU source build" in err


def _hide_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDACXX", "/nonexistent/nvcc")
    if not missing_toolchain(_resolution().source_build):  # /usr/local/cuda/bin/nvcc is still found by absolute path
        pytest.skip("a CUDA toolkit at /usr/local/cuda cannot be hidden from this test")


def test_auto_without_the_toolchain_stops_instead_of_a_cpu_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No terminal check any more: the same stop wherever the install runs."""
    _hide_cuda(monkeypatch)
    with pytest.raises(NothingFitsError) as stop:
        backend._gpu_host_fallback(_resolution(), None, cpu_prebuilt=True)
    line = str(stop.value)
    assert "not installing a CPU build on a host with NVIDIA GPUs unasked" in line and "\n" not in line
    assert "the GPU source build needs" in line and "-C selector=cpu (or HVD_SELECTOR=cpu)" in line
    err = capsys.readouterr().err  # pip prints a failed build's captured lines: the warning is among them
    assert "WARNING: this host has 1 NVIDIA GPU(s)" in err and "installing the CPU build" not in err


def test_no_cpu_build_to_install_never_says_installing_the_cpu_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpu-nvidia (or an index with no CPU build that fits): the GPU source build is what follows, not a CPU build."""
    _hide_cuda(monkeypatch)
    assert backend._gpu_host_fallback(_resolution("gpu-nvidia"), None, cpu_prebuilt=False) is None
    err = capsys.readouterr().err
    assert "WARNING: this host has 1 NVIDIA GPU(s)" in err and "CPU build" not in err.split("but gets no build")[1]


def test_never_build_stops_too_and_the_cpu_selector_is_the_way_out() -> None:
    with pytest.raises(NothingFitsError, match="build-policy is never-build"):
        backend._gpu_host_fallback(_resolution(), "never-build", cpu_prebuilt=True)
    assert backend._gpu_host_fallback(_resolution("cpu"), None, cpu_prebuilt=True) is None
    assert backend._gpu_host_fallback(_resolution("cpu"), "never-build", cpu_prebuilt=True) is None
