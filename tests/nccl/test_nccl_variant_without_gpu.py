"""The whole nccl variant (core + plugin, built by the top-level CMakeLists.txt)
on this machine with no GPU and no driver: it imports, serves CPU tensors, and
says why GPU operations are unavailable, in the plugin's words."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from devtools import hvd_nccl_build
from devtools.native_builds import NCCL, build_variant

from .nccl_helpers import ROOT, toolchain_missing

pytestmark = pytest.mark.slow

_SCRIPT = """
import json, numpy as np
import hvd_selector as hvd
from hvd_selector import _api
info = hvd.build_info()
hvd.init()
import hvd_selector.torch as ht
out = {"variant": info["variant"], "gpu_operations": info["gpu_operations"], "nccl_built": ht.nccl_built(),
       "reason": _api._core.gpu_unavailable_reason(),
       "allreduce": hvd.allreduce(np.arange(6, dtype=np.float32), op=hvd.Sum).tolist(),
       "size": hvd.size()}
hvd.shutdown()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def nccl_variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """site-packages-like prefix holding hvd_selector/ (core, plugin, Python) and nvidia/: the nccl
    variant's CMake install (devtools.native_builds, built once per source state and shared with
    tests/native/test_nccl_variant.py), beside the nvidia-nccl-cu13 wheel's files."""
    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    prefix = tmp_path_factory.mktemp("nccl-variant") / "site"
    prefix.mkdir()
    stage = build_variant("nccl-cuda13-x86_64_v3", NCCL).stage
    # copied, not linked: the loader resolves a link before it reads the plugin's $ORIGIN rpath (../nvidia)
    shutil.copytree(stage / "hvd_selector", prefix / "hvd_selector")
    wheel = hvd_nccl_build.nccl_wheel_dir()
    assert wheel is not None
    (prefix / "nvidia").symlink_to(wheel.parent, target_is_directory=True)
    return prefix


def test_installs_the_plugin_next_to_the_core(nccl_variant: Path) -> None:
    plugin = nccl_variant / "hvd_selector" / "libhvd_nccl.so"
    assert plugin.is_file()
    assert hvd_nccl_build.exported_symbols(plugin) == ["hvd_nccl_plugin_get"]
    assert list((nccl_variant / "hvd_selector").glob("_core*.so"))


def test_imports_serves_cpu_tensors_and_says_why_no_gpu(nccl_variant: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(nccl_variant), str(ROOT)]))
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("HVD_SELECTOR_TARGET", None)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=120, cwd=nccl_variant
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["variant"].startswith("target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl")
    assert out["size"] == 1
    assert out["allreduce"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # Horovod's nccl_built(): the NCCL_VERSION_CODE compiled against (the wheel's nccl.h), recorded by the build
    nccl = json.loads((nccl_variant / "hvd_selector" / "build_config.json").read_text())["nccl_version"]
    major, minor, patch = map(int, nccl.split("."))
    assert nccl == version("nvidia-nccl-cu13").split(".post")[0]
    assert out["nccl_built"] == major * 10000 + minor * 100 + patch
    if ctypes.util.find_library("cuda") is None:  # no driver here: the plugin's reason reaches the user
        assert "no NVIDIA driver found (libcuda.so.1 could not be loaded)" in out["reason"]
        assert out["gpu_operations"].startswith("unavailable: ")
        assert "\n" not in out["reason"]
    else:
        assert out["reason"] == "", out["reason"]
