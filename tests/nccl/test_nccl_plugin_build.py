"""The nccl variant's plugin, built here with nvcc 13 and the NCCL wheel: what
it exports, which GPU code it carries, what it needs at run time, and that it
loads and answers on a machine with no GPU and no driver."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import hvd_nccl_build, nccl_plugin_abi

from .nccl_helpers import ROOT, TEST_VARIANT, toolchain_missing

HAS_DRIVER = ctypes.util.find_library("cuda") is not None


def test_exports_only_the_plugin_entry_point(built_plugin: hvd_nccl_build.Built) -> None:
    assert hvd_nccl_build.exported_symbols(built_plugin.library) == ["hvd_nccl_plugin_get"]


def test_sass_for_each_arch_and_ptx_for_the_highest(built_plugin: hvd_nccl_build.Built) -> None:
    if hvd_nccl_build.cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    sass, ptx = hvd_nccl_build.cubins(built_plugin.library)
    assert sass == ["80", "90"]
    assert ptx == ["90"]


def test_scaling_and_fusion_kernels_for_every_dtype(built_plugin: hvd_nccl_build.Built) -> None:
    if hvd_nccl_build.cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    # One copy-and-scale kernel per dtype (bool shares uint8's), plus int16 widened to and narrowed from 32 bits.
    types = ["__half", "__nv_bfloat16", "double", "float", "int", "long", "unsigned char", "signed char", "short"]
    expected = [f"batched_copy_kernel<{t}, {t}, {t}>" for t in types]
    expected += ["batched_copy_kernel<short, short, int>", "batched_copy_kernel<int, short, short>"]
    assert hvd_nccl_build.kernels(built_plugin.library) == sorted(expected)


def test_needs_only_nccl_at_run_time(built_plugin: hvd_nccl_build.Built) -> None:
    needed, runpath = hvd_nccl_build.dynamic_info(built_plugin.library)
    assert "libnccl.so.2" in needed
    # cudart is linked statically; libcuda is dlopen()ed by it only when used.
    assert not [n for n in needed if n.startswith(("libcudart", "libcuda."))], needed
    assert runpath == ["$ORIGIN/../nvidia/nccl/lib"]


_PROBE = """
import json, sys
from devtools.nccl_plugin_abi import Plugin, PluginError
p = Plugin(sys.argv[1])
out = {"abi": p.table.abi_version, "versions": p.versions(), "devices": p.device_count(),
       "why": p.error()}
try:
    out["uid_bytes"] = len(p.unique_id())
except PluginError as exc:
    out["uid_error"] = str(exc)
for name, call in [("cc", lambda: p.compute_capability(0)),
                   ("allreduce", lambda: p.allreduce(0, 4, "float32")),
                   ("bad_init", lambda: p.init(3, 2, bytes(128), 0)),
                   ("init", lambda: p.init(0, 1, bytes(128), 0)),
                   ("abort", p.abort)]:
    try:
        call()
        out[name] = "ok"
    except PluginError as exc:
        out[name] = [exc.status, str(exc)]
p.finalize()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(built_plugin: hvd_nccl_build.Built) -> dict[str, object]:
    """Load the installed plugin in a fresh process with no LD_LIBRARY_PATH, so
    NCCL must be found through the plugin's RUNPATH as in a real install."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(ROOT)  # the probe imports devtools.nccl_plugin_abi
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(built_plugin.library)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_loads_through_the_wheel_rpath_and_reports_versions(probe: dict[str, object]) -> None:
    header = (ROOT / "native" / "include" / "hvd" / "nccl_plugin.h").read_text()
    declared = re.search(r"#define HVD_NCCL_PLUGIN_ABI (\d+)", header)
    assert declared is not None
    # The built plugin, the header the core is compiled with and the tests' ctypes mirror agree.
    assert probe["abi"] == int(declared.group(1)) == nccl_plugin_abi.ABI == 2
    versions = str(probe["versions"])
    assert versions.startswith("cuda_runtime=13.0 cuda_driver=")
    assert " nccl=2." in versions


@pytest.mark.skipif(HAS_DRIVER, reason="an NVIDIA driver is installed here")
def test_without_a_driver_there_are_no_devices_and_a_clear_reason(probe: dict[str, object]) -> None:
    assert probe["devices"] == 0
    assert "cuda_driver=none" in str(probe["versions"])
    assert str(probe["why"]).startswith("no NVIDIA driver found (libcuda.so.1 could not be loaded)")
    status, message = probe["cc"]  # type: ignore[misc]
    assert status == "internal" and message.startswith("no NVIDIA driver found")
    assert "\n" not in str(probe["why"])


def test_ncclGetUniqueId_needs_no_gpu(probe: dict[str, object]) -> None:
    assert probe.get("uid_bytes") == 128, probe.get("uid_error")


def test_collectives_before_init_and_bad_arguments_fail_cleanly(probe: dict[str, object]) -> None:
    assert probe["allreduce"] == ["invalid", "the NCCL communicator is not initialized: call init() first"]
    assert probe["bad_init"] == ["invalid", "init: rank 3 is not in [0, 2)"]
    assert probe["abort"] == "ok"  # nothing to abort: not an error
    if not HAS_DRIVER:
        status, message = probe["init"]  # type: ignore[misc]
        assert status == "internal" and message.startswith("init: no CUDA device: no NVIDIA driver found")


@pytest.fixture(scope="module")
def description(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    out = tmp_path_factory.mktemp("variant")
    path: Path = hvd_nccl_build.build_description(catalog.parse_variant(TEST_VARIANT), catalog, out)
    return path


def _configure(tmp_path: Path, description: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [
            "cmake",
            "-S",
            str(ROOT / "native" / "nccl" / "standalone"),
            "-B",
            str(tmp_path / "b"),
            f"-DHVD_BUILD_DESCRIPTION={description}",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode != 0, "configure should have failed"
    return " ".join(proc.stderr.split())  # CMake wraps long messages


def test_missing_nccl_names_what_to_install(tmp_path: Path, description: Path) -> None:
    err = _configure(tmp_path, description, f"-DHVD_NCCL_HOME={tmp_path}")
    assert (
        "NCCL not found (nccl.h + libnccl.so.2): pip install nvidia-nccl-cu13 into the Python that "
        "runs the build, set HVD_NCCL_HOME to an NCCL prefix, or see recipes/nccl/"
    ) in err


def test_wrong_nvcc_names_what_to_install(tmp_path: Path, description: Path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = dict(os.environ, CUDACXX=str(fake))
    err = _configure(tmp_path, description, env=env)
    assert "nvcc not found: install the CUDA 13.0 toolkit (see recipes/cuda/) or point CUDACXX" in err


def test_nvcc_of_another_cuda_line_is_refused(tmp_path: Path) -> None:
    if toolchain_missing():
        pytest.skip(str(toolchain_missing()))
    banner = subprocess.run([str(hvd_nccl_build.nvcc()), "--version"], capture_output=True, text=True).stdout
    if "release 13." not in banner:
        pytest.skip("needs nvcc 13 (to be the wrong line for a cuda=12 variant)")
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    cuda12 = catalog.parse_variant(TEST_VARIANT.replace("cuda=13", "cuda=12"))
    description = hvd_nccl_build.build_description(cuda12, catalog, tmp_path)
    err = _configure(tmp_path, description)
    assert "cannot build a cuda=12 variant: install a CUDA 12.x toolkit >= 12.4 (see recipes/cuda/)" in err


def test_the_ctypes_mirror_matches_the_header(tmp_path: Path) -> None:
    """devtools.nccl_plugin_abi (what the GPU tests and gpu-check drive the plugin with) lays out
    the table exactly as nccl_plugin.h does: every entry at the C compiler's offset."""
    import ctypes

    fields = [name for name, _ in nccl_plugin_abi.PluginTable._fields_]
    source = tmp_path / "offsets.c"
    source.write_text(
        '#include <stddef.h>\n#include <stdio.h>\n#include "hvd/nccl_plugin.h"\n'
        "int main(void) {\n"
        + "".join(f'  printf("%zu\\n", offsetof(hvd_nccl_plugin, {name}));\n' for name in fields)
        + '  printf("%zu\\n", sizeof(hvd_nccl_plugin));\n  return 0;\n}\n'
    )
    binary = tmp_path / "offsets"
    include = f"-I{ROOT / 'native' / 'include'}"
    subprocess.run(["cc", include, str(source), "-o", str(binary)], check=True, capture_output=True)
    offsets = [int(x) for x in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()]
    mirror = [getattr(nccl_plugin_abi.PluginTable, name).offset for name in fields]
    assert offsets == [*mirror, ctypes.sizeof(nccl_plugin_abi.PluginTable)]
