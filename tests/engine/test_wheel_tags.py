"""Our wheel-tag generator gives packaging.tags' tags in packaging.tags' order, without importing it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging import tags

from selector_backend.engine.host import HostProfile
from selector_backend.engine.wheel_tags import check_wheel_tags, host_tags, platform_tags, python_tags, ranked_host_tags

from .engine_helpers import ROOT, clean_env

# cp307 and cp3011 are what a profile's (cp|pp)3\d+ lets through with a leading zero;
# py311 is what detection writes for an interpreter that is neither CPython nor PyPy.
PYTHONS = [f"cp3{minor}" for minor in range(7, 15)] + ["cp30", "cp31", "cp32", "cp307", "cp3011", "pp310", "py311"]
LINUX = [
    (libc, machine)
    for machine in ("x86_64", "aarch64", "ppc64le")
    for libc in ("glibc 2.17", "glibc 2.28", "glibc 2.34", "glibc 2.39", "musl 1.1", "musl 1.2")
] + [("glibc 2.5", "x86_64"), ("glibc 2.12", "i686"), (None, "x86_64"), ("glibc 2.31", None)]
HOSTS = [HostProfile(platform="linux", libc=libc, machine=machine) for libc, machine in LINUX] + [
    HostProfile(platform="darwin", machine="x86_64"),
    HostProfile(platform="darwin", machine="aarch64"),
]
NO_PLATFORMS = [HostProfile(platform="windows", machine="x86_64"), HostProfile(machine="aarch64")]


def packaging_tags(python: str, platforms: list[str]) -> list[str]:
    """What host_tags yielded when it called packaging.tags (the arguments it passed)."""
    version = (int(python[2]), int(python[3:]))
    found = list(tags.cpython_tags(version, [python], platforms)) if python.startswith("cp") else []
    return [str(t) for t in [*found, *tags.compatible_tags(version, python, platforms)]]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: f"{h.platform}-{h.libc}-{h.machine}")
@pytest.mark.parametrize("python", PYTHONS)
def test_host_tags_are_packagings(host: HostProfile, python: str) -> None:
    host = host._replace(python=python)
    platforms = platform_tags(host)
    assert platforms  # a platform packaging would not replace with the running machine's
    assert list(host_tags(host)) == packaging_tags(python, platforms)


@pytest.mark.parametrize("host", NO_PLATFORMS, ids=lambda h: str(h.platform))
@pytest.mark.parametrize("python", ["cp311", "pp310"])
def test_a_host_without_known_platforms_gets_only_pure_wheels(host: HostProfile, python: str) -> None:
    """packaging.tags reads no platforms as 'the running machine's': a Windows profile
    resolved on Linux then took Linux wheels. Ours keeps only the -none-any tags, in order."""
    host = host._replace(python=python)
    assert platform_tags(host) == []
    running = [t for t in packaging_tags(python, []) if t.endswith("-none-any")]
    assert list(host_tags(host)) == running


def test_no_python_no_tags() -> None:
    assert list(host_tags(HostProfile(platform="linux", libc="glibc 2.39", machine="x86_64"))) == []


platform_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    python=st.from_regex(r"(cp|pp)3[0-9]{1,3}", fullmatch=True),
    platforms=st.lists(platform_names, min_size=1, max_size=5),
)
def test_python_tags_are_packagings(python: str, platforms: list[str]) -> None:
    assert list(python_tags(python, platforms)) == packaging_tags(python, platforms)


def test_host_tags_imports_neither_packaging_nor_logging(tmp_path: Path) -> None:
    """The cold-start budget: packaging.tags pulls in logging, sysconfig and the ELF readers."""
    code = (
        "import sys\n"
        "from selector_backend.engine.host import HostProfile\n"
        "from selector_backend.engine.wheel_tags import host_tags\n"
        "host = HostProfile(platform='linux', machine='x86_64', libc='glibc 2.39', python='cp311')\n"
        "assert next(host_tags(host)) == 'cp311-cp311-manylinux_2_39_x86_64'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('packaging', 'logging', 'sysconfig')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("python", ["py311", "pp310", "cp311"])
def test_a_tag_listed_twice_keeps_its_first_place(python: str) -> None:
    """packaging lists py3X-none-any twice for an interpreter that is neither CPython nor PyPy."""
    host = HostProfile(platform="linux", libc="glibc 2.39", machine="x86_64", python=python)
    listed = list(host_tags(host))
    ranked = ranked_host_tags(host)
    assert set(ranked) == set(listed)
    assert all(ranked[tag] == listed.index(tag) for tag in ranked)


def test_check_wheel_tags_expands_a_compressed_tag_set() -> None:
    host = HostProfile(platform="linux", libc="glibc 2.39", machine="x86_64", python="cp311")
    ranked = ranked_host_tags(host)
    fits, rank = check_wheel_tags("py2.py3-none-any", host, ranked)
    assert fits.ok and rank == ranked["py3-none-any"]
    miss, rank = check_wheel_tags("cp312-cp312-manylinux_2_28_x86_64", host, ranked)
    assert not miss.ok and rank == 10**9 and "cp312-cp312-manylinux_2_28_x86_64" in miss.reason
