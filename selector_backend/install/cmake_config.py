"""The build description: everything CMake needs to build one variant, computed once.

The pipe is one-way. Python turns a catalog variant into a
``BuildDescription`` (archspec's flags for the C++ compiler that will build
it, the CUDA architectures, the libraries from the catalog's ``[libraries]``
table, the exact variant.json and build_config.json) and writes it as one
CMake script of ``set()`` lines (``write_description``). CMakeLists.txt
includes that script and only builds: it holds no axis defaults and no
selection rules, and never calls back into Python. The scikit-build-core
source build, the CI builder (through the backend), the plugin's standalone
build and a developer's plain ``cmake -S . -B build`` (CMake runs
``python -m selector_backend cmake-config --write`` once) all get the
description from here. Adding an axis value touches the catalog only.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from selector_backend.engine import targets, variant_json
from selector_backend.engine.catalog import LIBRARIES, Catalog
from selector_backend.engine.variant import Variant, format_variant, variant_label
from selector_backend.errors import ExternalError, InputError

#: Version of the description's format; CMakeLists.txt refuses any other.
FORMAT = 1
#: build_config.json keys CMake fills in with what it found (empty in the description).
FOUND_BY_BUILD = ("mpi_compiler", "mpiexec", "build_type", "nccl_version")


@dataclass(frozen=True)
class Compiler:
    """The C++ compiler the flags are computed for, named as CMake names it."""

    cmake_id: str  # CMAKE_CXX_COMPILER_ID: GNU, Clang, AppleClang, IntelLLVM
    version: str  # CMAKE_CXX_COMPILER_VERSION
    path: str

    def __str__(self) -> str:
        return f"{self.cmake_id} {self.version}"


def probe_compiler(cxx: str | None = None) -> Compiler:
    """Ask the C++ compiler CMake will use (``cxx``, else $CXX, else c++/g++/clang++) who it is."""
    given = cxx or os.environ.get("CXX") or ""
    # CMake passes CMAKE_CXX_COMPILER, a path that may hold spaces; $CXX may carry arguments.
    command = [given] if os.path.isfile(given) else shlex.split(given)
    command = command or [next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), "c++")]
    banner = _ask(command, "--version")
    lowered = banner.lower()
    if "clang" in lowered:
        cmake_id = "AppleClang" if "apple" in lowered else "IntelLLVM" if "oneapi" in lowered else "Clang"
        found = re.search(r"version (\d+(?:\.\d+)+)", banner)
        version = found.group(1) if found else ""
    else:
        cmake_id, version = "GNU", _ask(command, "-dumpfullversion").strip()
    if not version:
        raise ExternalError(f"the C++ compiler {' '.join(command)} did not say its version; install g++ or set CXX")
    return Compiler(cmake_id, version, shutil.which(command[0]) or command[0])


def _ask(command: list[str], flag: str) -> str:
    try:
        return subprocess.run([*command, flag], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        what = " ".join(command)
        raise ExternalError(f"the C++ compiler {what} did not run ({exc}); install g++ or set CXX") from None


def cuda_architectures(variant: Variant) -> list[str]:
    """CMAKE_CUDA_ARCHITECTURES: SASS for every arch, PTX for the highest.

    Horovod's rule (DESIGN.md): ``80;90`` -> ``80-real;90-real;90-virtual``.
    """
    archs = [a for a in variant.values_of("cuda_arch") if a != "none"]
    if not archs:
        return []
    archs = sorted(set(archs), key=int)
    return [f"{a}-real" for a in archs] + [f"{archs[-1]}-virtual"]


@dataclass(frozen=True)
class BuildDescription:
    """One variant's complete build, as CMake receives it."""

    variant: Variant
    label: str
    compiler: Compiler
    target_flags: tuple[str, ...]
    libraries: tuple[str, ...]  # of LIBRARIES, from the catalog's [libraries] table
    cuda: str  # the CUDA line, "" for a CPU-only build
    cuda_toolkit: str
    cuda_architectures: tuple[str, ...]
    variant_json: str  # hvd_selector/variant.json and the wheel's .dist-info/variant.json
    build_config: Mapping[str, str]  # hvd_selector/build_config.json, before CMake adds FOUND_BY_BUILD

    @property
    def build_config_json(self) -> str:
        return json.dumps(dict(self.build_config), indent=2) + "\n"

    def cmake_script(self) -> str:
        """``set()`` lines, every value taken literally by CMake (bare or a bracket argument)."""
        values: dict[str, Iterable[str] | str] = {
            "HVD_DESCRIPTION_FORMAT": str(FORMAT),
            "HVD_VARIANT_STRING": format_variant(self.variant),
            "HVD_VARIANT_LABEL": self.label,
            "HVD_CXX_COMPILER_ID": self.compiler.cmake_id,
            "HVD_CXX_COMPILER_VERSION": self.compiler.version,
            "HVD_TARGET_FLAGS": self.target_flags,
            **{f"HVD_WITH_{lib.upper()}": "ON" if lib in self.libraries else "OFF" for lib in LIBRARIES},
            "HVD_CUDA": self.cuda,
            "HVD_CUDA_TOOLKIT": self.cuda_toolkit,
            "HVD_CUDA_ARCHITECTURES": self.cuda_architectures,
            "HVD_VARIANT_JSON_TEXT": self.variant_json,
            "HVD_BUILD_CONFIG_JSON_TEXT": self.build_config_json,
        }
        lines = [f"# Generated by `python -m selector_backend cmake-config` for {format_variant(self.variant)}."]
        lines.append("# The complete build of one variant (selector_backend/install/cmake_config.py); do not edit.")
        for name, value in values.items():
            lines.append(f"set({name} {_cmake_value(value)})")
        return "\n".join(lines) + "\n"


_PLAIN = re.compile(r"[A-Za-z0-9_.,+/:=-]+")


def _bracket(text: str) -> str:
    """``text`` as one CMake argument taken literally: bare when plain, else a bracket argument."""
    if _PLAIN.fullmatch(text):
        return text
    equals = next(n for n in range(len(text) + 1) if f"]{'=' * n}]" not in text)
    lead = "\n" if "\n" in text else ""  # CMake drops one newline right after the opening bracket
    return f"[{'=' * equals}[{lead}{text}]{'=' * equals}]"


def _cmake_value(value: Iterable[str] | str) -> str:
    if isinstance(value, str):
        return _bracket(value) if value else '""'
    items = list(value)
    if any(";" in item for item in items):
        raise ValueError(f"a CMake list element cannot hold ';': {items}")
    return " ".join(_bracket(item) for item in items) if items else '""'


def describe(variant: Variant, catalog: Catalog, compiler: Compiler) -> BuildDescription:
    """The build description of ``variant`` compiled by ``compiler``; InputError if impossible."""
    catalog.check(variant)
    target = str(variant["target"])
    flags = targets.optimization_flags(target, targets.compiler_name_for_cmake(compiler.cmake_id), compiler.version)
    cuda = str(variant.get("cuda", "none"))
    line = catalog.cuda_lines.get(cuda)
    toolkit = line.toolkit if line is not None else ""
    archs = tuple(cuda_architectures(variant))
    label = variant_label(variant)
    config = {
        "variant_label": label,
        "variant": format_variant(variant),
        **{axis: ",".join(variant.values_of(axis)) for axis in catalog.axes},
        "target_flags": " ".join(flags.split()),
        "cuda_toolkit": toolkit,
        "cuda_architectures": ",".join(archs),
        "compiler": str(compiler),
        **dict.fromkeys(FOUND_BY_BUILD, ""),
    }
    return BuildDescription(
        variant=variant,
        label=label,
        compiler=compiler,
        target_flags=tuple(flags.split()),
        libraries=catalog.libraries_of(variant),
        cuda="" if line is None else cuda,
        cuda_toolkit=toolkit,
        cuda_architectures=archs,
        variant_json=variant_json.dumps(variant, catalog),
        build_config=config,
    )


def write_description(description: BuildDescription, path: Path) -> Path:
    """Write the CMake script atomically (a failed run leaves nothing half-written)."""
    from selector_backend.files.atomic import atomic_write_text

    atomic_write_text(path, description.cmake_script())
    return path


def parse_request(assignments: Iterable[str], catalog: Catalog, machine: str | None = None) -> Variant:
    """The variant a developer asked CMake for: ``axis=value`` or the catalog's ``HVD_AXIS=value``.

    CMakeLists.txt forwards every ``HVD_*`` cache variable without knowing
    which are axes; names the catalog does not give an axis belong to CMake
    (HVD_NCCL_HOME ...) and are ignored here. Missing axes take the catalog's
    default, except the target, which defaults to this machine's baseline
    (``aarch64`` on an ARM machine) when the catalog has it.
    """
    by_cmake = {axis.cmake: name for name, axis in catalog.axes.items()}
    values: dict[str, str] = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"cmake-config: {item!r} is not AXIS=VALUE (e.g. target=x86_64_v3)")
        if name in by_cmake:
            name = by_cmake[name]
        elif name not in catalog.axes:
            if name.startswith("HVD_"):
                continue
            raise InputError(f"cmake-config: unknown axis {name!r}; axes: {', '.join(catalog.axes)}")
        values[name] = value
    if "target" not in values:
        baseline = {"arm64": "aarch64", "amd64": "x86_64"}.get((machine or platform.machine()).lower())
        baseline = baseline or (machine or platform.machine())
        if baseline in catalog.axes["target"].values:
            values["target"] = baseline
    return catalog.parse_variant(" ".join(f"{k}={v}" for k, v in values.items()), fill_defaults=True)
