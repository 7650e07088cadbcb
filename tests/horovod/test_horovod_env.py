"""horovod-env: HOROVOD_* for upstream Horovod from a host profile, never from this machine's CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector_backend.cli.main import main
from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.select import Sources, select_with
from selector_backend.errors import InputError
from selector_backend.interop.horovod import arch_flags, horovod_env, nccl_home, parse_compiler
from tests.spack.spack_hosts import host, host_json

GCC12 = ("gcc", "12.2.0")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def env_for(catalog, h, selector=None, compiler=GCC12, **kw):
    selection = select_with(parse_selector(selector, catalog), catalog, Sources.fixed(h))
    return horovod_env(selection, catalog, compiler, **kw)


def test_a100_host_gets_nccl_for_sm80_and_zen3_flags(catalog):
    result = env_for(catalog, host("ubuntu24.04", "zen3", "a100", driver="12.4"))
    env = result.env
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_GPU"] == "CUDA"
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80"
    assert env["HOROVOD_CPU_OPERATIONS"] == "GLOO"
    assert env["HOROVOD_WITH_GLOO"] == "1" and env["HOROVOD_WITHOUT_MPI"] == "1"
    assert env["HOROVOD_WITH_PYTORCH"] == "1" and env["HOROVOD_WITHOUT_TENSORFLOW"] == "1"
    # the profile's zen3, not this (icelake) build machine, and never -march=native
    assert env["HOROVOD_BUILD_ARCH_FLAGS"] == "-march=znver3 -mtune=znver3"
    assert "native" not in env["HOROVOD_BUILD_ARCH_FLAGS"]
    assert result.variant["cuda"] == "12"  # the driver supports 12.4, not 13.0


def test_gtx1080_and_h100_compute_capabilities(catalog):
    assert env_for(catalog, host("ubuntu24.04", "zen3", "gtx1080")).env["HOROVOD_BUILD_CUDA_CC_LIST"] == "61"
    h100 = env_for(catalog, host("ubuntu22.04", "sapphirerapids", "h100", driver="13.0"))
    assert h100.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "90"
    assert h100.env["HOROVOD_BUILD_ARCH_FLAGS"] == "-march=sapphirerapids -mtune=sapphirerapids"


def test_cpu_hosts_use_mpi_when_present_else_gloo(catalog):
    with_mpi = env_for(catalog, host("ubuntu24.04", "zen3", mpi="mpich")).env
    assert with_mpi["HOROVOD_CPU_OPERATIONS"] == "MPI" and with_mpi["HOROVOD_WITH_MPI"] == "1"
    assert "HOROVOD_GPU_OPERATIONS" not in with_mpi
    without = env_for(catalog, host("ubuntu24.04", "neoverse_v2")).env
    assert without["HOROVOD_CPU_OPERATIONS"] == "GLOO" and without["HOROVOD_WITHOUT_MPI"] == "1"
    assert without["HOROVOD_BUILD_ARCH_FLAGS"] == "-march=armv9-a+i8mm+bf16 -mtune=cortex-a710"  # archspec, gcc 12.2


def test_selector_cpu_on_a_gpu_host_and_pinned_target(catalog):
    env = env_for(catalog, host("ubuntu24.04", "zen3", "a100", mpi="mpich"), "cpu target=x86_64_v3").env
    assert "HOROVOD_GPU_OPERATIONS" not in env and env["HOROVOD_CPU_OPERATIONS"] == "MPI"
    assert env["HOROVOD_BUILD_ARCH_FLAGS"] == "-march=x86-64-v3 -mtune=generic"


def test_a_requested_variant_is_what_horovod_builds(tmp_path, capsys):
    """``-C variant=...`` is the source build everywhere, horovod-env included: its libraries and its
    target, not this host's best."""
    profile = tmp_path / "host.json"
    profile.write_text(json.dumps(host_json("ubuntu24.04", "zen3", "a100", driver="12.4")))
    variant = "variant=target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi,gloo"
    args = ["horovod-env", "--host-profile", str(profile), "--compiler", "gcc@12.2.0", "--json", "-C", variant]
    assert main(args) == 0
    env = json.loads(capsys.readouterr().out)["env"]
    assert "HOROVOD_GPU_OPERATIONS" not in env and env["HOROVOD_CPU_OPERATIONS"] == "MPI"
    assert env["HOROVOD_BUILD_ARCH_FLAGS"] == "-march=x86-64-v3 -mtune=generic"


def test_old_compiler_falls_back_to_the_nearest_ancestor():
    used, flags, notes = arch_flags("zen3", ("gcc", "9.1.0"))
    assert (used, flags) == ("zen2", "-march=znver2 -mtune=znver2")
    assert any("using its ancestor zen2" in n for n in notes)
    with pytest.raises(InputError, match="expected NAME@VERSION"):
        parse_compiler("gcc")


def test_nccl_home_from_a_pip_wheel_layout(catalog, tmp_path):
    wheel = tmp_path / "site-packages" / "nvidia" / "nccl"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    (wheel / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (wheel / "lib" / "libnccl.so.2").write_bytes(b"")
    result = env_for(catalog, host("ubuntu24.04", "zen3", "a100"), nccl_search=[tmp_path / "site-packages"])
    assert result.env["HOROVOD_NCCL_HOME"] == str(wheel)
    assert result.env["HOROVOD_NCCL_LIB"] == str(wheel / "lib")
    assert any("ln -s libnccl.so.2" in n for n in result.notes)
    # a profile that records the wheel's location (as detection does) needs no search
    data = host_json("ubuntu24.04", "zen3", "a100")
    data["libraries"]["nccl"] = {"version": "2.27.3", "location": str(wheel / "lib")}
    home, why = nccl_home(HostProfile.from_json(data))
    assert home == wheel and "2.27.3" in why
    # a system NCCL is left to Horovod's own search
    data["libraries"]["nccl"] = {"version": "2.21.5", "location": "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}
    assert "HOROVOD_NCCL_HOME" not in env_for(catalog, HostProfile.from_json(data)).env


def test_cli_shell_output_round_trips_through_a_real_shell(tmp_path):
    profile = tmp_path / "host.json"
    profile.write_text(json.dumps(host_json("ubuntu24.04", "zen3", "a100")))
    cmd = [
        sys.executable,
        "-m",
        "selector_backend",
        "horovod-env",
        "--host-profile",
        str(profile),
        "--compiler",
        "gcc@12.2.0",
    ]
    root = Path(__file__).resolve().parents[2]
    script = f'eval "$({" ".join(cmd)})" && printf "%s|%s" "$HOROVOD_BUILD_ARCH_FLAGS" "$HOROVOD_GPU_OPERATIONS"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout == "-march=znver3 -mtune=znver3|NCCL"


def test_cli_json_and_bad_input(tmp_path, capsys):
    profile = tmp_path / "host.json"
    profile.write_text(json.dumps(host_json("ubuntu24.04", "zen3", "h100", driver="13.0")))
    args = ["horovod-env", "--host-profile", str(profile), "--compiler", "gcc@13.2.0"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["env"]["HOROVOD_BUILD_CUDA_CC_LIST"] == "90" and data["variant"]["cuda"] == "13"
    assert main([*args, "--selector", "gpu-nvidai"]) == 2
    assert "did you mean gpu-nvidia?" in capsys.readouterr().err
    assert main(["horovod-env", "--host-profile", str(profile), "--compiler", "gcc"]) == 2
