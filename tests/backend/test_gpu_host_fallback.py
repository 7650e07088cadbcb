"""What ``auto`` installs on a GPU host no GPU prebuilt fits (DESIGN: never silently a CPU build):
the GPU source build when the CUDA toolchain is here, else the CPU prebuilt, loudly."""

from __future__ import annotations

import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import resolve
from selector_backend.engine.sources import catalog_matrix
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
    chosen = backend._gpu_host_fallback(resolution, None)
    assert chosen is not None and chosen["cuda"] == "12" and chosen["cuda_arch"] == ("61",)
    err = capsys.readouterr().err
    assert "WARNING: this host has 1 NVIDIA GPU(s)" in err and "building the GPU source build" in err


def test_auto_without_the_toolchain_keeps_the_cpu_build_loudly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDACXX", "/nonexistent/nvcc")
    resolution = _resolution()
    chosen = backend._gpu_host_fallback(resolution, None)
    if chosen is not None:  # /usr/local/cuda/bin/nvcc is still found by absolute path
        pytest.skip("a CUDA toolkit at /usr/local/cuda cannot be hidden from this test")
    err = capsys.readouterr().err
    assert "WARNING: this host has 1 NVIDIA GPU(s)" in err and "WARNING: installing the CPU build" in err


def test_never_build_and_cpu_selector_never_switch_to_a_source_build() -> None:
    assert backend._gpu_host_fallback(_resolution(), "never-build") is None
    assert backend._gpu_host_fallback(_resolution("cpu"), None) is None
