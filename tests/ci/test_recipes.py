"""The dependency recipes, run for real: Debian packages and PyPI wheels.

Each recipe compiles (and where it can, runs) a small program against the
dependency it provides, so a passing test means the dependency works, not
just that a file exists.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
DEPENDENCIES = ("openssl", "mpi", "nccl", "cuda")
ENVIRONMENTS = ("manylinux", "debian", "pip")


def recipe(
    path: str, *args: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(RECIPES / path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def exports(stdout: str) -> dict[str, str]:
    """The `export NAME='value'` lines a recipe prints, as a dict."""
    out = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        name, _, value = words[1].partition("=")
        out[name] = value
    return out


def test_every_dependency_has_every_environment() -> None:
    for dep in DEPENDENCIES:
        for env in ENVIRONMENTS:
            assert (RECIPES / dep / f"{env}.sh").is_file(), f"recipes/{dep}/{env}.sh"


def test_recipes_pass_shellcheck() -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck not installed (.ci/apt-packages.txt lists it)")
    scripts = sorted(str(p.relative_to(RECIPES)) for p in RECIPES.rglob("*.sh"))
    result = subprocess.run(
        [exe, "-x", "-S", "warning", *scripts], cwd=RECIPES, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("environment", ["debian", "pip"])
def test_openssl_computes_an_rfc_4231_hmac(environment: str) -> None:
    """The gloo controller's one library: libcrypto's HMAC-SHA256, compiled and run."""
    result = recipe(f"openssl/{environment}.sh")
    assert result.returncode == 0, result.stderr
    assert "hmac-sha256 5bdcc146" in result.stderr
    assert (Path(exports(result.stdout)["OPENSSL_ROOT_DIR"]) / "include/openssl/hmac.h").is_file()


def test_pip_openssl_without_headers_says_what_to_install(tmp_path: Path) -> None:
    result = recipe("openssl/pip.sh", env={"OPENSSL_ROOT_DIR": str(tmp_path)})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"openssl/pip.sh: error: no OpenSSL headers under {tmp_path} (PyPI has none): apt install libssl-dev, "
        "or dnf install openssl-devel, or set OPENSSL_ROOT_DIR"
    ]


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_debian_mpi_runs_two_ranks(impl: str) -> None:
    result = recipe("mpi/debian.sh", env={"HVD_MPI": impl})
    assert result.returncode == 0, result.stderr
    assert "allreduce=2" in result.stderr
    found = exports(result.stdout)
    assert found["MPI_C_COMPILER"].endswith(f"mpicc.{impl}")
    assert found["HVD_MPI"] == impl


def test_pip_mpich_wheel_compiles_and_runs_two_ranks(tmp_path: Path) -> None:
    """The mpich wheel (the `mpi` extra's MPI) is a complete toolchain."""
    prefix = tmp_path / "deps"
    result = recipe("mpi/pip.sh", "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    assert "allreduce=2" in result.stderr
    found = exports(result.stdout)
    assert found["MPI_C_COMPILER"] == f"{prefix}/bin/mpicc"
    assert list(prefix.glob("lib/libmpi.so.12")), "the wheel provides the soname the matrix excludes"
    again = recipe("mpi/pip.sh", "--check", "--prefix", str(prefix))
    assert again.returncode == 0, again.stderr


def test_debian_cuda_toolchain_compiles_a_kernel() -> None:
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc on this machine")
    result = recipe("cuda/debian.sh")
    assert result.returncode == 0, result.stderr
    assert "compiles sm_120" in result.stderr
    wrong = recipe("cuda/debian.sh", env={"HVD_CUDA_TOOLKIT": "11.8", "PATH": "/usr/bin:/bin"})
    assert wrong.returncode == 1
    assert len(wrong.stderr.strip().splitlines()) == 1


def test_cuda_recipe_takes_the_line_and_arch_from_the_build_description(tmp_path: Path) -> None:
    """The recipe reads the same file CMake builds from: its toolkit, and the arch its PTX is for."""
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc on this machine")

    def description(*axes: str) -> str:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.cmake"
        cmd = ["python3", "-m", "selector_backend", "cmake-config", "--write", str(path), *axes]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        return str(path)

    cuda13 = description("target=x86_64_v3", "cuda=13", "cuda_arch=89,80", "tensor_ops=nccl")
    ok = recipe("cuda/debian.sh", env={"HVD_BUILD_DESCRIPTION": cuda13})
    assert ok.returncode == 0, ok.stderr
    assert "(CUDA 13." in ok.stderr and "compiles sm_89" in ok.stderr
    cuda12 = description("target=x86_64_v3", "cuda=12", "cuda_arch=80", "tensor_ops=nccl")
    wrong = recipe("cuda/debian.sh", env={"HVD_BUILD_DESCRIPTION": cuda12})
    assert wrong.returncode == 1 and "the variant needs CUDA 12.x" in wrong.stderr
    cpu = recipe("cuda/debian.sh", env={"HVD_BUILD_DESCRIPTION": description("target=x86_64")})
    assert cpu.returncode == 1 and "describes no CUDA build" in cpu.stderr
    assert len(cpu.stderr.strip().splitlines()) == 1


def test_missing_dependency_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    result = recipe("nccl/pip.sh", "--check", "--prefix", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "run without --check to install nvidia-nccl-cu13" in result.stderr
    bad = recipe("mpi/debian.sh", env={"HVD_MPI": "lam"})
    assert bad.returncode == 1 and "HVD_MPI=lam is not mpich or openmpi" in bad.stderr
    usage = recipe("openssl/debian.sh", "--frobnicate")
    assert usage.returncode == 1 and "unknown option --frobnicate" in usage.stderr


@pytest.mark.slow
def test_pip_nccl_wheel_links_and_reports_its_version(tmp_path: Path) -> None:
    """Downloads nvidia-nccl-cu13 (~300 MB unpacked; pip's cache makes re-runs fast)."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc to link the check program")
    result = recipe("nccl/pip.sh", "--prefix", str(tmp_path / "deps"), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "reports version code" in result.stderr
    assert exports(result.stdout)["NCCL_LIBRARY"].endswith("libnccl.so.2")
    assert (tmp_path / "deps/lib/libnccl.so").is_symlink()


@pytest.mark.slow
def test_pip_cuda_toolchain_compiles_a_kernel(tmp_path: Path) -> None:
    """Downloads nvcc 13.0 and its back ends as wheels (~270 MB unpacked)."""
    result = recipe("cuda/pip.sh", "--prefix", str(tmp_path / "deps"), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "(CUDA 13.0) compiles sm_120" in result.stderr
    assert "/nvidia/cu13/bin/nvcc" in exports(result.stdout)["CMAKE_CUDA_COMPILER"]
