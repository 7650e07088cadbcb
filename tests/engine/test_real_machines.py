"""Real (GPU, driver, CPU) combinations and the pick the compatibility rules must give.

Each row is a machine people run, written as its HostProfile would describe it, with
where its facts come from. Sources:
  [cc]     NVIDIA, "CUDA GPUs - Compute Capability", https://developer.nvidia.com/cuda-gpus
  [driver] NVIDIA, CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding
           Driver Versions" (535 -> CUDA 12.2, 570 -> 12.8, 575 -> 12.9, 580 -> 13.0)
  [compat] NVIDIA, "CUDA Compatibility" guide, "Minor Version Compatibility": a binary
           built with 12.x runs on any driver >= 525 (CUDA 12.0); 13.x on >= 580;
           PTX JIT needs a driver at least as new as the toolkit that produced the PTX
  [apple]  Python's platform.machine() on Apple silicon macOS returns 'arm64';
           archspec names the M2 core 'm2'
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import Candidate, resolve
from selector_backend.engine.sources import catalog_matrix
from selector_backend.engine.variant import format_variant

from .engine_helpers import ROOT, clean_env

A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}  # [cc]
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}  # [cc]
T4 = {"name": "Tesla T4", "compute_capability": "7.5"}  # [cc]
GTX1080 = {"name": "NVIDIA GeForce GTX 1080", "compute_capability": "6.1"}  # [cc]
B200 = {"name": "NVIDIA B200", "compute_capability": "10.0"}  # [cc]
RTX5090 = {"name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"}  # [cc]
GH200 = {"name": "NVIDIA GH200 480GB", "compute_capability": "9.0"}  # [cc] Grace (neoverse_v2) + H100

NCCL = "tensor_ops=nccl controllers=gloo frameworks=pytorch"


def profile(cpu: str, gpus: list[dict[str, str]], driver: str | None, machine: str | None = None) -> HostProfile:
    data: dict[str, Any] = {
        "platform": "linux",
        "os": "ubuntu22.04",
        "libc": "glibc 2.35",
        "python": "cp311",
        "cpu": {"microarch": cpu},
        "gpus": [{"vendor": "nvidia", **g} for g in gpus],
        "cuda_driver": driver,
    }
    if machine:
        data["machine"] = machine
    return HostProfile.from_json(data, source="real machine")


# (id, host, expected selected variant, expected text in the reasons / notes)
MACHINES = [
    # 8x A100 on the 535 driver (CUDA 12.2) [driver]: CUDA 12.4 builds run by minor-version compat [compat]
    (
        "a100-535",
        profile("icelake", [A100] * 8, "12.2"),
        "target=x86_64_v3 cuda=12 cuda_arch=80 ",
        "minor-version compatibility",
    ),
    # H100 on 575 (CUDA 12.9) [driver]: SASS 90 of the 12 line, the 13.x build needs a 580 driver [compat]
    (
        "h100-575",
        profile("sapphirerapids", [H100] * 8, "12.9"),
        "target=x86_64_v3 cuda=12 cuda_arch=90 ",
        "has SASS for GPU 9.0",
    ),
    # GTX 1080 (6.1) on 535 [cc][driver]: no prebuilt has sm_6x; CPU build plus the warning
    ("gtx1080-535", profile("skylake", [GTX1080], "12.2"), "target=x86_64_v3 cuda=none ", "cuda=12 cuda_arch=61"),
    # B200 on 570 (CUDA 12.8) [driver]: only compute_90 PTX of the 12.4 build runs (12.8 >= 12.4)
    ("b200-570", profile("sapphirerapids", [B200] * 8, "12.8"), "target=x86_64_v3 cuda=12 cuda_arch=90 ", "PTX JIT"),
    # B200 on 580 (CUDA 13.0) [driver]: the 13 line has SASS 100
    (
        "b200-580",
        profile("sapphirerapids", [B200] * 8, "13.0"),
        "target=x86_64_v3 cuda=13 cuda_arch=100 ",
        "SASS for GPU 10.0",
    ),
    # RTX 5090 on 570 (12.8): PTX of compute_90; on 580 (13.0): SASS 120 [cc][driver]
    ("rtx5090-570", profile("zen4", [RTX5090], "12.8"), "target=x86_64_v3 cuda=12 cuda_arch=90 ", "PTX JIT"),
    ("rtx5090-580", profile("zen4", [RTX5090], "13.0"), "target=x86_64_v3 cuda=13 cuda_arch=120 ", "SASS for GPU 12.0"),
    # mixed A100 + T4 on 535: each prebuilt has one arch; sm_70 serves the T4 but the A100
    # only through 12.4 PTX, which a 12.2 driver cannot JIT [compat]: CPU build, loud, and the
    # source build with SASS for both
    ("a100+t4-535", profile("cascadelake", [A100, T4], "12.2"), "target=x86_64_v4 cuda=none ", "cuda_arch=75,80"),
    # on 580: the 13 line's sm_75 serves the T4 natively and the A100 through compute_75 PTX
    ("a100+t4-580", profile("cascadelake", [A100, T4], "13.0"), "target=x86_64_v3 cuda=13 cuda_arch=75 ", "PTX JIT"),
    # GH200 (Grace neoverse_v2 + H100) on 580 [cc][driver]
    (
        "gh200-580",
        profile("neoverse_v2", [GH200], "13.0"),
        f"target=neoverse_v2 cuda=13 cuda_arch=90 {NCCL}",
        "SASS for GPU 9.0",
    ),
    # Apple M2 as macOS reports it [apple]: machine arm64, no GPU
    ("apple-m2", profile("m2", [], None, machine="arm64")._replace(platform="darwin"), "target=aarch64 cuda=none ", ""),
]


@pytest.mark.parametrize(("host", "expected", "why"), [m[1:] for m in MACHINES], ids=[m[0] for m in MACHINES])
def test_real_machine_gets_the_right_prebuilt(catalog: Any, host: HostProfile, expected: str, why: str) -> None:
    r = resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector("auto", catalog))
    assert r.selected is not None, [c.reasons for c in r.candidates[:3]]
    assert format_variant(r.selected.variant).startswith(expected), format_variant(r.selected.variant)
    assert any(why in text for text in (*r.selected.reasons, *r.notes)), (r.selected.reasons, r.notes)
    gpu_host = bool(host.nvidia_gpus())
    warned = any(n.startswith("WARNING: this host has") for n in r.notes)
    # a GPU host gets a CPU build only with the loud warning; a GPU build never carries it
    assert warned is (gpu_host and r.selected.variant["cuda"] == "none")


def test_gtx1080_warning_counts_the_gpu_builds_and_names_the_fitting_source_build(catalog: Any) -> None:
    """One bounded line: the closest GPU build and why, how many more (and where to see them), the fit."""
    host = profile("skylake", [GTX1080], "12.2")
    r = resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector("auto", catalog))
    warning = r.notes[0]
    assert "1 NVIDIA GPU(s) [1x NVIDIA GeForce GTX 1080 (6.1)" in warning
    gpu_builds = {c.variant for c in r.candidates if c.variant["cuda"] != "none"}
    assert f"none of the {len(gpu_builds)} prebuilt GPU builds fits" in warning
    assert f"{len(gpu_builds) - 1} more: hvd-selector resolve --explain" in warning
    assert "closest: cuda=12 cuda_arch=70: cuda_arch 70 cannot run on GPU 6.1" in warning
    assert "cuda=12 cuda_arch=61" in warning and "CUDA 12 toolkit" in warning
    assert len(warning) < 600, len(warning)  # was 2,500 characters, one per GPU build
    assert r.source_build["cuda"] == "12" and r.source_build["cuda_arch"] == ("61",)
    # gpu-nvidia never selects a CPU build
    strict = resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector("gpu-nvidia", catalog))
    assert strict.selected is None and strict.source_build["cuda"] == "12"
    # the user asked for a CPU build: no warning
    cpu = resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector("cpu", catalog))
    assert not any(n.startswith("WARNING") for n in cpu.notes)


def test_ptx_only_gpu_on_a_driver_older_than_the_toolkit_is_rejected(catalog: Any) -> None:
    """An sm_80-only CUDA 12.4 build on an H100 with the 535 driver (CUDA 12.2): PTX JIT
    of 12.4 PTX needs a 12.4 driver [compat]; the same build on 550 (12.4) runs."""
    variant = catalog.parse_variant(f"target=x86_64_v3 cuda=12 cuda_arch=80 {NCCL}")
    host = profile("sapphirerapids", [H100], "12.2")
    r = resolve(host, [Candidate(variant)], catalog, parse_selector("gpu-nvidia", catalog))
    assert r.selected is None
    assert "GPU 9.0 runs this build only through PTX JIT" in r.candidates[0].reasons[0]
    assert "supports only CUDA 12.2" in r.candidates[0].reasons[0]
    newer = resolve(host._replace(cuda_driver="12.4"), [Candidate(variant)], catalog, parse_selector("auto", catalog))
    assert newer.selected is not None


def _cli(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "selector_backend", *args],
        cwd=ROOT,
        env=clean_env(tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_resolve_a100_on_535_and_apple_m2(tmp_path: Path) -> None:
    a100 = tmp_path / "a100.json"
    a100.write_text(json.dumps({"cpu": {"microarch": "icelake"}, "gpus": [A100], "cuda_driver": "12.2"}))
    proc = _cli("resolve", "--host-profile", str(a100), "--json", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["selected"]["variant"]["cuda"] == "12" and data["notes"] == []
    # Apple M2 as macOS reports it: accepted, machine normalised
    m2 = tmp_path / "m2.json"
    m2.write_text(json.dumps({"platform": "darwin", "machine": "arm64", "cpu": {"microarch": "m2"}}))
    proc = _cli("resolve", "--host-profile", str(m2), "--json", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["selected"]["variant"]["target"] == "aarch64"
    # and the Spack picker: the dated listing's darwin/sequoia aarch64 build
    m2.write_text(json.dumps({"platform": "darwin", "os": "sequoia", "machine": "arm64", "cpu": {"microarch": "m2"}}))
    listing = ROOT / "tests" / "spack" / "data" / "listings" / "py-horovod-develop-2025-07-13.listing"
    proc = _cli("spack", "pick", str(listing), "--host-profile", str(m2), "--json", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["selected"]["hash"] == "c2wozwfzntnwpmpr6cfez6njs7dp2uc7"
