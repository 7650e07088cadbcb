"""The nccl variant without a GPU: imports, serves CPU tensors through Gloo,
and refuses GPU tensors with "GPU operations unavailable: <why>"."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.native_builds import NCCL, REPO, Build, build_variant, python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nccl_build() -> Build:
    if not shutil.which("nvcc") or not (REPO / "native" / "nccl" / "CMakeLists.txt").exists():
        pytest.skip("needs nvcc and native/nccl")
    try:
        import nvidia.nccl  # noqa: F401
    except ImportError:
        pytest.skip("needs the nvidia-nccl-cu13 wheel (NCCL headers)")
    return build_variant("nccl-cuda13-x86_64_v3", NCCL)


def test_imports_and_reports_why_gpu_is_unavailable(nccl_build: Build, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "build-info", "--json"],
        cwd=tmp_path,
        env=nccl_build.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["tensor_ops"] == "nccl" and info["cuda_archs"] == ["80"] and info["controllers"] == ["gloo"]
    assert (nccl_build.stage / "hvd_selector" / "libhvd_nccl.so").exists()
    reason = info["gpu_operations"]
    assert reason.startswith("unavailable: ")
    # No GPU here: either the plugin cannot load (no libnccl/libcuda) or it finds no device.
    assert "libhvd_nccl.so" in reason or "no CUDA device" in reason, reason


def test_cpu_tensors_served_by_gloo(nccl_build: Build, tmp_path: Path) -> None:
    code = (
        "import numpy as np, hvd_selector as h\nh.init()\n"
        "print(h.allreduce(np.arange(4, dtype=np.float32), op=h.Sum).tolist())"
    )
    proc = python(nccl_build, code, cwd=tmp_path)
    assert proc.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]", proc.stdout + proc.stderr


def test_gpu_tensor_dispatch_fails_clearly(nccl_build: Build, tmp_path: Path) -> None:
    code = (
        "from tests.native.workers.fake_cuda import cuda_capsule\n"
        "import hvd_selector as h\nfrom hvd_selector import _core\nh.init()\n"
        "try:\n _core.allreduce(cuda_capsule(), cuda_capsule(), 0, 1.0, 1.0)\n"
        "except h.UnavailableError as e:\n print('UNAVAILABLE', e)"
    )
    proc = python(nccl_build, code, cwd=tmp_path)
    assert proc.stdout.startswith("UNAVAILABLE GPU operations unavailable: "), proc.stdout + proc.stderr


def test_gpu_tensor_on_cpu_build_fails_clearly(gloo_build: Build, tmp_path: Path) -> None:
    code = (
        "from tests.native.workers.fake_cuda import cuda_capsule\n"
        "import hvd_selector as h\nfrom hvd_selector import _core\nh.init()\n"
        "try:\n _core.allreduce(cuda_capsule(), cuda_capsule(), 0, 1.0, 1.0)\n"
        "except h.UnavailableError as e:\n print('UNAVAILABLE', e)"
    )
    proc = python(gloo_build, code, cwd=tmp_path)
    assert proc.stdout.startswith("UNAVAILABLE GPU operations unavailable: this build is CPU-only"), (
        proc.stdout + proc.stderr
    )


def test_the_api_on_a_cpu_build_names_the_command_for_the_gpu_build(gloo_build: Build, tmp_path: Path) -> None:
    """The core says what is true (a CPU-only build); the Python API adds the command that installs the
    GPU build into this environment, as printed (the reinstall command of the import guard and doctor)."""
    code = (
        "import numpy as np\nfrom tests.native.workers.fake_cuda import DeviceArray\n"
        "import hvd_selector as h\nh.init()\n"
        "try:\n h.allreduce(DeviceArray(np.arange(4, dtype=np.float32)))\n"
        "except h.UnavailableError as e:\n print('UNAVAILABLE', e)"
    )
    proc = python(gloo_build, code, cwd=tmp_path)
    line = proc.stdout.strip()
    assert line.startswith("UNAVAILABLE GPU operations unavailable: this build is CPU-only ("), (
        proc.stdout + proc.stderr
    )
    command = line.split("; install the GPU build: ", 1)[1]
    assert " -m pip install --force-reinstall --no-deps --no-cache-dir " in command, command
    assert command.endswith("-C selector=gpu-nvidia hvd-selector"), command
