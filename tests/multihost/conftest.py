"""Fixtures: throwaway namespace "hosts" with sshd, and the two staged gloo builds (x86_64_v3, x86_64_v4)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from devtools.native_builds import GLOO, Build, build_variant

from . import netns


def _needs_root_and_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    for tool in ("ip", "/usr/sbin/sshd", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (openssh-server, iproute2 in .ci/apt-packages.txt)")


def _cluster(tmp_path_factory: pytest.TempPathFactory, count: int = 3) -> Iterator[netns.Cluster]:
    _needs_root_and_tools()
    c = netns.create(count, tmp_path_factory.mktemp("cluster"))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.Cluster]:
    """Three hosts shared by the tests that leave them intact; torn down even on failure."""
    yield from _cluster(tmp_path_factory)


@pytest.fixture()
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.Cluster]:
    """Three hosts of its own for a test that breaks them (fault tests)."""
    yield from _cluster(tmp_path_factory)


@pytest.fixture(scope="session")
def v3_build() -> Build:
    return build_variant("gloo-x86_64_v3", GLOO)


def _cpu_has_avx512() -> bool:
    import archspec.cpu

    return "avx512f" in archspec.cpu.host().features


@pytest.fixture(scope="session", params=["x86_64+x86_64_v3", "x86_64_v3+x86_64_v4"])
def pair(request: pytest.FixtureRequest, v3_build: Build) -> tuple[Build, Build]:
    """Two targets of one release for a heterogeneous job (the v4 half needs an AVX-512 CPU to run)."""
    if request.param == "x86_64_v3+x86_64_v4":
        if not _cpu_has_avx512():
            pytest.skip("x86_64_v4 ranks need an AVX-512 CPU; this one has none (the guard refuses the build)")
        return v3_build, build_variant("gloo-x86_64_v4", dict(GLOO, HVD_TARGET="x86_64_v4"))
    return build_variant("gloo-x86_64", dict(GLOO, HVD_TARGET="x86_64")), v3_build
