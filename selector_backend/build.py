"""The source-build fallback: exactly the resolved variant, through scikit-build-core.

The variant reaches CMake as ``cmake.define.HVD_*`` config settings (comma-
joined lists: SKBUILD_CMAKE_DEFINE splits on ';'); CMake asks
``cmake-config`` for flags and writes variant.json into the wheel. Before
anything compiles, ``check_toolchain`` names whatever is missing and how to
get it, so a user sees one line instead of a CMake log.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import variant_json
from .catalog import Catalog
from .cmake_config import cmake_defines
from .errors import ExternalError, IntegrityError
from .host import HostProfile
from .variant import Variant, format_variant
from .wheelcheck import read_member

BASE_BUILD_REQUIRES = ("scikit-build-core>=0.10", "nanobind>=2.0", "cmake>=3.24", "ninja")
NCCL_WHEEL = {"12": "nvidia-nccl-cu12", "13": "nvidia-nccl-cu13"}
#: Where GlooConfig.cmake sits under a prefix (CMake's config-mode search layouts).
GLOO_CONFIG_UNDER_PREFIX = ("share/cmake/Gloo", "lib*/cmake/Gloo", "lib/*/cmake/Gloo")
GLOO_SYSTEM_PREFIXES = ("/usr", "/usr/local")


def log(message: str) -> None:
    """Backend progress: pip shows it with ``pip install -v``."""
    print(f"hvd-selector: {message}", file=sys.stderr, flush=True)


def build_requires(variant: Variant, host: HostProfile) -> list[str]:
    """What the isolated build environment needs for this variant (nothing more)."""
    needs = list(BASE_BUILD_REQUIRES)
    if "mpi" in (*variant.values_of("tensor_ops"), *variant.values_of("controllers")):
        mpi = host.library("mpi")
        if mpi is not None and (mpi.location or "").startswith("pip wheel ") and mpi.implementation:
            dist = (mpi.location or "").split()[2]
            needs.append(f"{dist}=={mpi.version}" if mpi.version else dist)
    cuda = str(variant["cuda"])
    if cuda in NCCL_WHEEL and variant["tensor_ops"] == "nccl":
        needs.append(NCCL_WHEEL[cuda])
    return needs


def _which_any(*names: str) -> str | None:
    for name in names:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def gloo_config_found(environ: Mapping[str, str]) -> bool:
    """GlooConfig.cmake where find_package(Gloo) looks: Gloo_DIR, under a CMAKE_PREFIX_PATH
    entry (a Spack build hands the Gloo it built that way), or a system prefix."""
    gloo_dir = environ.get("Gloo_DIR")
    if gloo_dir and os.path.isfile(os.path.join(gloo_dir, "GlooConfig.cmake")):
        return True
    prefixes = [p for p in environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p] + list(GLOO_SYSTEM_PREFIXES)
    return any(glob.glob(os.path.join(p, d, "GlooConfig.cmake")) for p in prefixes for d in GLOO_CONFIG_UNDER_PREFIX)


def missing_toolchain(variant: Variant) -> list[str]:
    """Each missing tool or library, phrased as what to install."""
    problems = []
    if not _which_any(os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        problems.append("a C++17 compiler (apt install g++, or set CXX)")
    uses = {*variant.values_of("tensor_ops"), *variant.values_of("controllers")}
    if "gloo" in uses and not gloo_config_found(os.environ):
        problems.append("Gloo (apt install libgloo-dev, or recipes/gloo/; or set Gloo_DIR or CMAKE_PREFIX_PATH)")
    if "mpi" in uses and not _which_any(os.environ.get("MPICC", ""), "mpicc"):
        problems.append("MPI with mpicc (pip install mpich, or apt install libmpich-dev; see recipes/mpi/)")
    if variant["cuda"] != "none" and not _which_any(os.environ.get("CUDACXX", ""), "nvcc", "/usr/local/cuda/bin/nvcc"):
        problems.append(f"the CUDA {variant['cuda']} toolkit with nvcc (see recipes/cuda/; or set CUDACXX)")
    return problems


def check_toolchain(variant: Variant) -> None:
    problems = missing_toolchain(variant)
    if problems:
        raise ExternalError(
            f"cannot build {format_variant(variant)} from source: missing {'; '.join(problems)}. "
            "Install them, or choose a variant this machine can build "
            "(e.g. -C selector=cpu, or -C variant='tensor_ops=gloo ...')."
        )


def skbuild_settings(variant: Variant, catalog: Catalog, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {f"cmake.define.{k}": v for k, v in cmake_defines(variant, catalog).items()}
    settings.update(extra or {})
    return settings


def verify_wheel_variant(wheel: Path, variant: Variant, catalog: Catalog) -> None:
    """The wheel must carry *.dist-info/variant.json describing exactly ``variant``."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        if len(names) != 1:
            raise IntegrityError(f"{wheel.name}: expected one .dist-info/variant.json, found {len(names)}")
        raw = read_member(archive, names[0])  # bounded: a hostile variant.json may inflate to gigabytes
        _, built = variant_json.parse(raw, catalog, source=f"{wheel.name}:{names[0]}")
    if built != variant:
        raise IntegrityError(f"{wheel.name} was built as {format_variant(built)}, not {format_variant(variant)}")


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
    import scikit_build_core.build as skbuild

    settings = skbuild_settings(variant, catalog)
    log(f"building {format_variant(variant)} from source with scikit-build-core")
    if editable:
        return str(skbuild.build_editable(wheel_directory, settings, metadata_directory))
    name = str(skbuild.build_wheel(wheel_directory, settings, None))
    verify_wheel_variant(Path(wheel_directory) / name, variant, catalog)
    return name
