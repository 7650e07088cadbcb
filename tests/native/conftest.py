"""Fixtures for the native tests: one build per variant and source state.

See devtools/native_builds.py (shared with benchmarks/) for where builds live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.native_builds import GLOO, Build, build_variant, mpi_defines


@pytest.fixture(scope="session")
def gloo_build() -> Build:
    return build_variant("gloo-x86_64_v3", GLOO)


@pytest.fixture(scope="session")
def gloo_v4_build() -> Build:
    """The AVX-512 build, for the guard under qemu-user CPU models without AVX-512."""
    return build_variant("gloo-x86_64_v4", {**GLOO, "HVD_TARGET": "x86_64_v4"})


def _mpi_build(impl: str) -> Build:
    if not Path(f"/usr/bin/mpicc.{impl}").exists():
        pytest.skip(f"mpicc.{impl} not installed")
    return build_variant(f"mpi-{impl}-x86_64_v3", mpi_defines(impl))


@pytest.fixture(scope="session")
def mpich_build() -> Build:
    return _mpi_build("mpich")


@pytest.fixture(scope="session")
def openmpi_build() -> Build:
    return _mpi_build("openmpi")


@pytest.fixture(scope="session", params=["gloo", "mpich", "openmpi"])
def any_build(request: pytest.FixtureRequest) -> Build:
    return request.getfixturevalue(f"{request.param}_build")
