"""The source-build fallback: exactly the resolved variant, through the project's own build backend.

Every variant has one build description (``cmake_config.describe``: flags,
CUDA architectures, libraries, variant.json and build_config.json). How it
reaches the build is the project's choice (``engine.project``):
``cmake-file`` (hvd-selector's) writes it as one CMake script named by the
``cmake.define.HVD_BUILD_DESCRIPTION`` config setting of scikit-build-core, and
CMake only builds from it; ``flags`` runs the project's own PEP 517 backend
with archspec's flags for the target in CFLAGS/CXXFLAGS and the project's
per-value config settings and environment, then writes the variant records
(``.dist-info/variant.json``, and variant.json + build_config.json in the
project's package) into the wheel it made. Before anything compiles,
``check_toolchain`` names whatever is missing and how to get it, so a user
sees one line instead of a CMake log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.nccl_pairing import NCCL_WHEEL
from selector_backend.engine.project import ProjectConfig
from selector_backend.engine.variant import Variant, format_variant
from selector_backend.errors import ExternalError, IntegrityError
from selector_backend.files.archives import open_zip
from selector_backend.install.cmake_config import describe, probe_compiler, write_description
from selector_backend.install.wheelcheck import read_member

#: hvd-selector's own (its pyproject.toml's [tool.hvd-selector] build-requires; a project names its own)
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
    from selector_backend.engine.project import load_project

    needs = without_tools_on_path(load_project().build_requires)
    uses = load_catalog().libraries_of(variant)
    if "mpi" in uses:
        dist = _mpi_wheel(host)
        if dist:
            mpi = host.library("mpi")
            needs.append(f"{dist}=={mpi.version}" if mpi and mpi.version else dist)
    cuda = str(variant.get("cuda", "none"))
    if cuda in NCCL_WHEEL and "nccl" in uses:
        needs.append(NCCL_WHEEL[cuda])
    return needs


#: Build tools that a requirement names and a new enough copy on PATH serves as well, as
#: scikit-build-core decides for itself: pip would otherwise put a cmake wheel (about 30 MB
#: unpacked) into every isolated build environment.
PATH_TOOLS = ("cmake", "ninja")


def without_tools_on_path(requirements: Iterable[str]) -> list[str]:
    """The requirements less those of ``PATH_TOOLS`` that the PATH's own command satisfies (its
    ``--version``, with the requirement's specifier); a marker-bound requirement is left to pip."""
    from selector_backend.vendored import import_module

    requirement_of = import_module("packaging.requirements").Requirement
    kept = []
    for text in requirements:
        req = requirement_of(text)
        if req.name.lower() in PATH_TOOLS and req.marker is None:
            found = tool_version(req.name.lower())
            if found is not None and req.specifier.contains(found, prereleases=True):
                continue
        kept.append(text)
    return kept


def tool_version(command: str) -> str | None:
    """The version a build tool on PATH prints for ``--version`` (its first dotted number), or None."""
    import re

    path = shutil.which(command)
    found = re.search(r"\d+(?:\.\d+)+", version_output(path)) if path else None
    return found.group(0) if found else None


def version_output(program: str) -> str:
    """What ``program --version`` prints on stdout; empty when it does not answer."""
    import subprocess

    try:
        return subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


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

    release = re.search(r"release (\d+)\.(\d+)", version_output(nvcc))
    return f"{release.group(1)}.{release.group(2)}" if release else None


def missing_toolchain(variant: Variant, host: HostProfile | None = None) -> list[str]:
    """Each missing tool or library, phrased as what to install.

    ``host`` lets a pip-wheel MPI count as present: the build requirements bring it.
    """
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.project import load_project

    problems = []
    if load_project().build_description == "flags":
        if not _which_any(os.environ.get("CC", ""), os.environ.get("CXX", ""), "cc", "gcc", "clang", "c++"):
            problems.append("a C/C++ compiler (apt install gcc g++, or set CC/CXX)")
    elif not _which_any(os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        problems.append("a C++17 compiler (apt install g++, or set CXX)")

    uses = load_catalog().libraries_of(variant)
    if "openssl" in uses and not openssl_headers_found(os.environ):
        problems.append(
            "OpenSSL's libcrypto headers (apt install libssl-dev, or dnf install openssl-devel; "
            "or set OPENSSL_ROOT_DIR)"
        )
    if "mpi" in uses and not _mpi_wheel(host) and not _which_any(os.environ.get("MPICC", ""), "mpicc"):
        problems.append("MPI with mpicc (pip install mpich, or apt install libmpich-dev; see recipes/mpi/)")
    cuda = str(variant.get("cuda", "none"))
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


#: Where a wheel's CMake build runs, below the source tree: build/wheel-builds/<temporary>/cmake, as
#: deep as the test suite's variant builds (build/test-variants/<name>/build), so that ccache, which
#: hashes paths inside the tree relative to the build directory (CMakeLists.txt sets its base_dir),
#: sees the same compile for both and for every other checkout of the same sources.
WHEEL_BUILDS = Path("build", "wheel-builds")


@contextlib.contextmanager
def cmake_build_dir(source: Path) -> Iterator[Path]:
    """A fresh CMake build directory for one wheel (removed afterwards); outside the tree if it is read-only."""
    import tempfile

    made = [d for d in (source / WHEEL_BUILDS.parent, source / WHEEL_BUILDS) if not d.exists()]
    try:
        for folder in made:
            folder.mkdir()
        parent: Path | None = source / WHEEL_BUILDS
    except OSError:
        parent = None
    try:
        with tempfile.TemporaryDirectory(prefix="hvd-", dir=parent) as work:
            yield Path(work, "cmake")
    finally:
        for folder in reversed(made):  # leave the tree as it was
            with contextlib.suppress(OSError):
                folder.rmdir()


def skbuild_settings(description: Path, build_dir: Path) -> dict[str, Any]:
    """scikit-build-core's config settings: the build description (nothing else about the variant)
    and where CMake builds."""
    return {"cmake.define.HVD_BUILD_DESCRIPTION": str(description), "build-dir": str(build_dir)}


def verify_wheel_variant(wheel: Path, variant: Variant, catalog: Catalog, label: str | None = None) -> None:
    """The wheel's two variant records must both describe exactly ``variant``.

    Installers read ``*.dist-info/variant.json``; the import guard reads the
    package's own copy (``hvd_selector/variant.json``, the project's import
    name). A wheel where they disagree would install as one variant and be
    guarded as another, so it is refused. ``label`` names the wheel in errors
    (``wheel`` may be a download's temporary file).
    """
    from selector_backend.engine.project import load_project

    label = label or wheel.name
    guard_copy = f"{load_project().package(catalog.namespace)}/variant.json"
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
    """Build ``variant`` with the project's backend; return the wheel's file name."""
    from selector_backend.engine.project import load_project

    check_toolchain(variant)
    project = load_project()
    if project.build_description == "flags":
        return build_with_flags(variant, catalog, project, Path(wheel_directory), editable=editable)
    import tempfile

    import scikit_build_core.build as skbuild

    description = describe(variant, catalog, probe_compiler())
    log(f"building {format_variant(variant)} from source with scikit-build-core ({description.compiler})")
    with tempfile.TemporaryDirectory(prefix="hvd-build-") as work, cmake_build_dir(Path.cwd()) as build_dir:
        settings = skbuild_settings(write_description(description, Path(work) / "build_description.cmake"), build_dir)
        if editable:
            return str(skbuild.build_editable(wheel_directory, settings, metadata_directory))
        name = str(skbuild.build_wheel(wheel_directory, settings, None))
    verify_wheel_variant(Path(wheel_directory) / name, variant, catalog)
    return name


def build_with_flags(
    variant: Variant, catalog: Catalog, project: ProjectConfig, wheel_directory: Path, *, editable: bool = False
) -> str:
    """The project's own PEP 517 backend builds ``variant``: the target's flags in CFLAGS/CXXFLAGS, the project's
    per-value config settings and environment; then the variant records go into the wheel it made."""
    import importlib

    from selector_backend.install.import_guard import guard_members
    from selector_backend.install.wheel_members import DIST_INFO, add_members

    description = describe(variant, catalog, probe_compiler())
    flags = " ".join(description.target_flags)
    settings = project.per_value(project.config_settings, variant)
    added = project.per_value(project.environment, variant)
    env = {name: f"{os.environ.get(name, '')} {flags}".strip() for name in ("CFLAGS", "CXXFLAGS")}
    env.update(added)
    log(
        f"building {format_variant(variant)} from source with {project.build_backend} ({description.compiler}: {flags})"
    )
    backend = importlib.import_module(project.build_backend)
    hook = backend.build_editable if editable else backend.build_wheel
    wheel_directory = wheel_directory.resolve()
    with _fresh_tree(project.root, editable), _environment(env):
        name = str(hook(str(wheel_directory), settings))
    package = project.package(catalog.namespace)
    wheel = wheel_directory / name
    record = description.variant_json.encode()
    members = {
        f"{DIST_INFO}/variant.json": record,
        f"{package}/variant.json": record,
        f"{package}/build_config.json": description.build_config_json.encode(),
    }
    if not editable:  # an editable install imports the source tree's package, which the wheel does not carry
        members.update(guard_members(package, _package_init(wheel, package), variant, catalog))
    add_members(wheel, members)
    if not editable:
        verify_wheel_variant(wheel, variant, catalog)
    return name


def _package_init(wheel: Path, package: str) -> str | None:
    """The text of the wheel's ``package/__init__.py`` (None: the package has none to hook the guard into)."""
    with open_zip(wheel, what="wheel") as archive:
        name = f"{package}/__init__.py"
        if name not in archive.namelist():
            return None
        return read_member(archive, name, wheel=wheel.name).decode("utf-8")


@contextlib.contextmanager
def _fresh_tree(root: Path, editable: bool) -> Iterator[None]:
    """Run the backend in a copy of the source tree without its build outputs: a backend that keeps object
    files (setuptools' build/) would link the previous variant's objects, compiled with other flags, into this
    one. An editable install builds in place (it points at the tree)."""
    import tempfile

    if editable:
        yield
        return
    outputs = {"build", "dist", "_skbuild", ".eggs"}
    with tempfile.TemporaryDirectory(prefix="hvd-variant-") as work:
        tree = Path(work) / root.name
        shutil.copytree(
            root, tree, symlinks=True, ignore=lambda d, names: outputs & set(names) if d == str(root) else ()
        )
        before = Path.cwd()
        os.chdir(tree)
        try:
            yield
        finally:
            os.chdir(before)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set while the backend runs in this process, the previous values back afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
