"""The matrix's auditwheel decisions, checked with real auditwheel on real ELF files.

A tiny extension is compiled here against Debian's MPICH and Gloo (and, for the
ISA check, marked x86-64-v3 the way RHEL-based manylinux toolchains mark it);
the repair command each job would run decides what ends up in the wheel.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.errors import ExternalError
from selector_backend.publishing import matrix, publish

from .wheelfiles import write_wheel

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("cc") is None, reason="needs an x86_64 C compiler"
)


def wheel_with(lib: Path, tmp: Path) -> Path:
    files = {
        f"demo/{lib.name}": lib.read_bytes(),
        "demo/__init__.py": b"",
        "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: false\n"
        b"Tag: cp311-cp311-linux_x86_64\n",
    }
    return write_wheel(tmp / "in" / "demo-1.0-cp311-cp311-linux_x86_64.whl", files)


def job_for(text: str) -> matrix.Job:
    catalog = load_catalog()
    return matrix.make_job("test", catalog.parse_variant(text), catalog, matrix.DEFAULT_PYTHONS)


def test_mpi_is_excluded_and_libcrypto_is_bundled(tmp_path: Path) -> None:
    src = tmp_path / "ext.c"
    src.write_text("#include <mpi.h>\nint demo_rank(void){int r=0;MPI_Comm_rank(MPI_COMM_WORLD,&r);return r;}\n")
    lib = tmp_path / "libdemo.so"
    subprocess.run(
        ["mpicc.mpich", "-shared", "-fPIC", str(src), "-o", str(lib), "-Wl,--no-as-needed", "-lcrypto"],
        check=True,
        capture_output=True,
    )
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "libmpich.so.12" in needed and "libcrypto.so" in needed, "Debian MPICH's soname"
    job = job_for("target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi,gloo frameworks=pytorch")
    repaired = publish.repair(wheel_with(lib, tmp_path), tmp_path / "out", job.auditwheel_excludes, job.isa_check)
    names = zipfile.ZipFile(repaired).namelist()
    assert any("libcrypto" in n for n in names), names  # the gloo controller's one library
    assert not any("libmpi" in n for n in names), names
    # Without the exclusions auditwheel would have grafted MPI (what the matrix prevents).
    grafted = publish.repair(wheel_with(lib, tmp_path), tmp_path / "out2", (), True)
    assert any("libmpi" in n for n in zipfile.ZipFile(grafted).namelist())


def test_isa_check_is_kept_for_baseline_and_disabled_for_v3(tmp_path: Path) -> None:
    src = tmp_path / "dot.c"
    src.write_text(
        "float dot(const float*a,const float*b,int n){float s=0;for(int i=0;i<n;i++)s+=a[i]*b[i];return s;}\n"
    )
    lib = tmp_path / "libdot.so"
    # RHEL's toolchain (manylinux_2_28) marks the ISA level it compiled for; do it explicitly here.
    subprocess.run(
        ["cc", "-O3", "-march=x86-64-v3", "-shared", "-fPIC", str(src), "-o", str(lib), "-Wl,-z,x86-64-v3"],
        check=True,
        capture_output=True,
    )
    base = job_for("target=x86_64 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch")
    v3 = job_for("target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch")
    with pytest.raises(ExternalError, match="unsupported ISA extensions"):
        publish.repair(wheel_with(lib, tmp_path), tmp_path / "a", base.auditwheel_excludes, base.isa_check)
    ok = publish.repair(wheel_with(lib, tmp_path), tmp_path / "b", v3.auditwheel_excludes, v3.isa_check)
    assert "manylinux" in ok.name
