"""The source-build fallback: exactly the resolved variant, through scikit-build-core.

The variant reaches CMake as one build description (``cmake_config.describe``:
flags, CUDA architectures, libraries, variant.json and build_config.json),
written to a file and named by the ``cmake.define.HVD_BUILD_DESCRIPTION``
config setting; CMake only builds from it. Before anything compiles,
``check_toolchain`` names whatever is missing and how to get it, so a user
sees one line instead of a CMake log.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.nccl_pairing import NCCL_WHEEL
from selector_backend.engine.variant import Variant, format_variant
from selector_backend.errors import ExternalError, IntegrityError
from selector_backend.files.archives import open_zip
from selector_backend.install.cmake_config import describe, probe_compiler, write_description
from selector_backend.install.wheelcheck import read_member

BASE_BUILD_REQUIRES = ("scikit-build-core>=0.10", "nanobind>=2.2", "cmake>=3.24", "ninja")
#: Where CMake's FindOpenSSL looks for the headers the gloo controller's TCP mesh needs (libcrypto's HMAC).
OPENSSL_SYSTEM_PREFIXES = ("/usr", "/usr/local")


def log(message: str) -> None:
    """Backend progress: pip shows it with ``pip install -v``."""
    print(f"hvd-selector: {message}", file=sys.stderr, flush=True)


def _mpi_wheel(host: HostProfile | None) -> str | None:
    """The MPI runtime's pip distribution name when the host's MPI is a pip wheel."""
    mpi = host.library("mpi") if host is not None else None
    if mpi is not None and (mpi.location or "").startswith("pip wheel ") and mpi.implementation:
        return (mpi.location or "").split()[2]
    return None


def build_requires(variant: Variant, host: HostProfile) -> list[str]:
    """What the isolated build environment needs for this variant (nothing more)."""
    from selector_backend.engine.catalog import load_catalog

    needs = list(BASE_BUILD_REQUIRES)
    uses = load_catalog().libraries_of(variant)
    if "mpi" in uses:
        dist = _mpi_wheel(host)
        if dist:
            mpi = host.library("mpi")
            needs.append(f"{dist}=={mpi.version}" if mpi and mpi.version else dist)
    cuda = str(variant["cuda"])
    if cuda in NCCL_WHEEL and "nccl" in uses:
        needs.append(NCCL_WHEEL[cuda])
    return needs


def _which_any(*names: str) -> str | None:
    for name in names:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def openssl_headers_found(environ: Mapping[str, str]) -> bool:
    """openssl/hmac.h where find_package(OpenSSL) looks: OPENSSL_ROOT_DIR, a CMAKE_PREFIX_PATH
    entry (a Spack build hands its openssl that way), or a system prefix."""
    prefixes = [environ.get("OPENSSL_ROOT_DIR", "")]
    prefixes += environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) + list(OPENSSL_SYSTEM_PREFIXES)
    return any(p and os.path.isfile(os.path.join(p, "include", "openssl", "hmac.h")) for p in prefixes)


def nvcc_release(nvcc: str) -> str | None:
    """``major.minor`` of an nvcc (``nvcc --version``), or None when it does not answer."""
    import re
    import subprocess

    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    release = re.search(r"release (\d+)\.(\d+)", out)
    return f"{release.group(1)}.{release.group(2)}" if release else None


def missing_toolchain(variant: Variant, host: HostProfile | None = None) -> list[str]:
    """Each missing tool or library, phrased as what to install.

    ``host`` lets a pip-wheel MPI count as present: the build requirements bring it.
    """
    problems = []
    if not _which_any(os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        problems.append("a C++17 compiler (apt install g++, or set CXX)")
    from selector_backend.engine.catalog import load_catalog

    uses = load_catalog().libraries_of(variant)
    if "openssl" in uses and not openssl_headers_found(os.environ):
        problems.append(
            "OpenSSL's libcrypto headers (apt install libssl-dev, or dnf install openssl-devel; "
            "or set OPENSSL_ROOT_DIR)"
        )
    if "mpi" in uses and not _mpi_wheel(host) and not _which_any(os.environ.get("MPICC", ""), "mpicc"):
        problems.append("MPI with mpicc (pip install mpich, or apt install libmpich-dev; see recipes/mpi/)")
    cuda = str(variant["cuda"])
    if cuda != "none":
        nvcc = _which_any(os.environ.get("CUDACXX", ""), "nvcc", "/usr/local/cuda/bin/nvcc")
        have = nvcc_release(nvcc) if nvcc else None
        if nvcc is None:
            problems.append(f"the CUDA {cuda} toolkit with nvcc (see recipes/cuda/; or set CUDACXX)")
        elif have is None or have.split(".")[0] != cuda:
            problems.append(
                f"the CUDA {cuda} toolkit: {nvcc} is CUDA {have or 'of unknown version'}, and a cuda={cuda} "
                f"build needs CUDA {cuda}.x nvcc (see recipes/cuda/; set CUDACXX to it)"
            )
    return problems


def check_toolchain(variant: Variant, host: HostProfile | None = None) -> None:
    """Fail with one line (exit 4) before anything is downloaded or compiled."""
    problems = missing_toolchain(variant, host)
    if problems:
        raise ExternalError(
            f"cannot build {format_variant(variant)} from source: missing {'; '.join(problems)}. "
            "Install them, or choose a variant this machine can build "
            "(e.g. -C selector=cpu, or -C variant='tensor_ops=gloo ...')."
        )


def skbuild_settings(description: Path) -> dict[str, Any]:
    """scikit-build-core's config settings: the build description, nothing else about the variant."""
    return {"cmake.define.HVD_BUILD_DESCRIPTION": str(description)}


def verify_wheel_variant(wheel: Path, variant: Variant, catalog: Catalog, label: str | None = None) -> None:
    """The wheel's two variant records must both describe exactly ``variant``.

    Installers read ``*.dist-info/variant.json``; the import guard reads the
    package's own ``hvd_selector/variant.json``. A wheel where they disagree
    would install as one variant and be guarded as another, so it is refused.
    ``label`` names the wheel in errors (``wheel`` may be a download's temporary file).
    """
    label = label or wheel.name
    guard_copy = f"{catalog.namespace}/variant.json"
    with open_zip(wheel, label, what="wheel") as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        if len(names) != 1:
            raise IntegrityError(f"{label}: expected one .dist-info/variant.json, found {len(names)}")
        if guard_copy not in archive.namelist():
            raise IntegrityError(f"{label}: has no {guard_copy} (the import guard's record of the build)")
        records = [  # bounded reads: a hostile variant.json may inflate to gigabytes
            variant_json.parse(read_member(archive, name, wheel=label), catalog, source=f"{label}:{name}")[1]
            for name in (names[0], guard_copy)
        ]
    built, guarded = records
    if guarded != built:
        raise IntegrityError(
            f"{label}: {guard_copy} says {format_variant(guarded)} but {names[0]} says "
            f"{format_variant(built)}; refusing a wheel whose records disagree"
        )
    if built != variant:
        raise IntegrityError(f"{label} was built as {format_variant(built)}, not {format_variant(variant)}")


def build_wheel(
    variant: Variant,
    catalog: Catalog,
    wheel_directory: str,
    *,
    editable: bool = False,
    metadata_directory: str | None = None,
) -> str:
    """Run scikit-build-core for ``variant``; return the wheel's file name."""
    check_toolchain(variant)
    import tempfile

    import scikit_build_core.build as skbuild

    description = describe(variant, catalog, probe_compiler())
    log(f"building {format_variant(variant)} from source with scikit-build-core ({description.compiler})")
    with tempfile.TemporaryDirectory(prefix="hvd-build-") as work:
        settings = skbuild_settings(write_description(description, Path(work) / "build_description.cmake"))
        if editable:
            return str(skbuild.build_editable(wheel_directory, settings, metadata_directory))
        name = str(skbuild.build_wheel(wheel_directory, settings, None))
    verify_wheel_variant(Path(wheel_directory) / name, variant, catalog)
    return name
