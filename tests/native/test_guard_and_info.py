"""Import-time hardware guard, build_info / build-info, launcher input errors."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.native_builds import Build, python

from .native_helpers import source_module

pytestmark = pytest.mark.slow  # builds (or reuses) native variants

PROBE = (
    "import sys\ntry:\n import hvd_selector\nexcept ImportError as e:\n print('IMPORTERROR', e)\n"
    "print('core loaded' if 'hvd_selector._core' in sys.modules else 'core not loaded')"
)


def qemu(build: Build, cpu: str, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run this Python under qemu-user emulating ``cpu`` (cpuid answers as that CPU would)."""
    if not shutil.which("qemu-x86_64") or platform.machine() != "x86_64":
        pytest.skip("needs qemu-user (qemu-x86_64) on an x86_64 machine")
    return subprocess.run(
        ["qemu-x86_64", "-cpu", cpu, sys.executable, *argv],
        cwd=cwd,
        env=build.env(**env),
        capture_output=True,
        text=True,
        timeout=180,
    )


# Haswell has AVX2 but no AVX-512; Nehalem has neither (SSE4.2 only).
@pytest.mark.parametrize(
    ("cpu", "lacks"),
    [("haswell", ["avx512f", "avx512bw"]), ("nehalem", ["avx", "avx2", "avx512f", "fma"])],
)
@pytest.mark.parametrize("pretend", [None, "x86_64_v4"])
def test_guard_checks_the_real_cpu_under_qemu(
    gloo_v4_build: Build, cpu: str, lacks: list[str], pretend: str | None, tmp_path: Path
) -> None:
    """Issue 12: HVD_SELECTOR_TARGET steers selection only; the guard reads cpuid, so the
    AVX-512 build is refused with the missing features (never SIGILL, rc 132)."""
    env = {"HVD_SELECTOR_TARGET": pretend} if pretend else {}
    proc = qemu(gloo_v4_build, cpu.capitalize(), ["-c", PROBE], tmp_path, **env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"IMPORTERROR hvd_selector: this build targets x86_64_v4 but this CPU is {cpu}")
    missing = lines[0].split("host lacks ", 1)[1]
    assert all(feature in missing for feature in lacks), lines[0]
    assert "-m pip install --force-reinstall --no-deps --no-cache-dir hvd-selector" in lines[0]
    assert lines[1] == "core not loaded"  # the guard ran before any native code


def test_guard_accepts_a_descendant_under_qemu(gloo_build: Build, tmp_path: Path) -> None:
    """The x86_64_v3 build loads on an emulated Haswell (the guard is not refusing everything)."""
    proc = qemu(gloo_build, "Haswell", ["-c", PROBE], tmp_path)
    assert proc.stdout.splitlines() == ["core loaded"], proc.stdout + proc.stderr[-2000:]


def test_build_info_refused_by_guard(gloo_build: Build, tmp_path: Path) -> None:
    proc = qemu(gloo_build, "Nehalem", ["-m", "selector_backend", "build-info"], tmp_path)
    assert proc.returncode == 4
    assert proc.stderr.count("\n") == 1 and "lacks" in proc.stderr and "Traceback" not in proc.stderr


def test_overrides_never_steer_the_guard(gloo_build: Build, tmp_path: Path) -> None:
    """A pretended weaker or misspelled target changes nothing at import: the real CPU runs v3."""
    from selector_backend.engine.targets import runs_on

    host = source_module("_guard").real_cpu()
    if not runs_on("x86_64_v3", host):
        pytest.skip(f"this CPU ({host}) cannot run the x86_64_v3 build")
    for pretend in ("x86_64_v2", "neoverse_v1", "hasswell"):
        proc = python(gloo_build, PROBE, cwd=tmp_path, HVD_SELECTOR_TARGET=pretend)
        assert proc.stdout.splitlines() == ["core loaded"], proc.stdout + proc.stderr


def test_guard_refuses_another_family() -> None:
    guard = source_module("_guard")
    from selector_backend.jobs.build_facts import BuildFacts

    facts = BuildFacts("v3", {"target": ("x86_64_v3",)}, {})
    with pytest.raises(ImportError, match=r"targets x86_64_v3 but this CPU is neoverse_v1: .* x86_64 target"):
        guard.check_cpu(facts, host_target="neoverse_v1")


def test_guard_on_this_host(gloo_build: Build, tmp_path: Path) -> None:
    proc = python(gloo_build, PROBE, cwd=tmp_path)
    assert proc.stdout.splitlines() == ["core loaded"], proc.stdout + proc.stderr


def test_gpu_guard_uses_cuda_arch_rules() -> None:
    check_gpu = source_module("_guard").check_gpu
    assert check_gpu(["80", "90"], "8.6") == "sass"
    assert check_gpu(["80", "90"], "10.0") == "ptx"
    with pytest.raises(RuntimeError, match=r"cuda_arch=80,90 which cannot run on a GPU of compute capability 7\.5"):
        check_gpu(["80", "90"], "7.5")


def test_build_info_command(any_build: Build, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "build-info", "--json"],
        cwd=tmp_path,
        env=any_build.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["target"] == "x86_64_v3"
    assert info["target_flags"] == "-march=x86-64-v3 -mtune=generic"
    assert "avx2" in info["kernels"] and "f16c" in info["kernels"]
    assert info["cuda_archs"] == [] and info["gpu_operations"].startswith("unavailable")
    if any_build.name.startswith("gloo"):
        assert info["tensor_ops"] == "gloo" and info["controllers"] == ["gloo"]
        # issue 39: what the build contains, not the value's name: TCP, no Gloo library
        assert info["network_transport"] == "tcp"
        assert info["contains"] == "tensor operations and controller: TCP (the gloo controller; no Gloo library)"
        assert info["libraries"] == {}  # the gloo controller links no third-party library
    else:
        impl = "MPICH" if "mpich" in any_build.name else "Open MPI"
        assert info["tensor_ops"] == "mpi" and impl in info["libraries"]["mpi"]
        assert info["network_transport"] == "mpi" and info["contains"] == "tensor operations and controller: MPI"
        assert info["mpiexec"].endswith("mpich" if impl == "MPICH" else "openmpi")
    text = subprocess.run(
        [sys.executable, "-m", "selector_backend", "build-info"],
        cwd=tmp_path,
        env=any_build.env(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "Available tensor operations:" in text and "CPU target: x86_64_v3" in text
    assert "] Gloo" not in text  # the core links no Gloo library; the gloo controller is a TCP mesh
    tcp = "[X]" if any_build.name.startswith("gloo") else "[ ]"
    assert text.count(f"    {tcp} TCP (the gloo controller; no Gloo library)") == 2, text


def test_gpu_tensors_refused_clearly_on_cpu_build(gloo_build: Build, tmp_path: Path) -> None:
    code = "import hvd_selector as h; h.init(); from hvd_selector import _core\nprint(_core.gpu_unavailable_reason())"
    proc = python(gloo_build, code, cwd=tmp_path)
    assert proc.stdout.startswith("this build is CPU-only (target=x86_64_v3"), proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["-np", "0", "python", "x.py"], "-np must be at least 1 (got 0)"),
        (["-np", "2"], "no command to run"),
        (["-np", "2", "--timeout", "-1", "python"], "--timeout must be a positive number of seconds"),
    ],
)
def test_run_bad_input(gloo_build: Build, args: list[str], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "run", *args],
        cwd=tmp_path,
        env=gloo_build.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1


def test_uninitialised_use(gloo_build: Build, tmp_path: Path) -> None:
    code = (
        "import hvd_selector as h, numpy as np\n"
        "for f in (h.rank, lambda: h.allreduce(np.ones(2))):\n"
        " try: f()\n except ValueError as e: print(type(e).__name__, e)"
    )
    proc = python(gloo_build, code, cwd=tmp_path)
    assert proc.stdout.splitlines() == [
        "NotInitializedError hvd_selector has not been initialised; call hvd_selector.init() first",
        "NotInitializedError hvd_selector is not initialised: call hvd_selector.init() first",
    ]


def test_a_checkout_without_a_build_says_so_and_how_to_install_one(tmp_path: Path) -> None:
    """No variant.json next to the package (a source checkout): one ImportError with the fact and the
    command, never a KeyError or a native loader error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", "import hvd_selector"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("ImportError: hvd_selector: variant.json is missing from"), last
    assert "this is not an installed build; reinstall it: " in last and " -m pip install --force-reinstall" in last
