"""End-to-end fixtures: real variant wheels, a published variant index on a real loopback HTTP
server, an sdist that embeds the index URL, and local wheels for fresh virtual environments.

The three gloo wheels (x86_64, x86_64_v3, x86_64_v4) are built through the project's
own release builder (``hvd-selector build-variants``: backend + auditwheel) once per
state of their sources, and kept under build/test-wheels/ for the next session and the
other pytest-xdist workers; each session publishes them with its own sdist (its URL
differs) through ``selector_backend.publishing.publish``, as release engineers do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from devtools.venvs import shared_wheelhouse
from selector_backend.publishing.publish import build_sdist

from .backend_helpers import (
    BUILD_DEPS,
    E2E_TARGETS,
    REPO,
    RUNTIME_DEPS,
    VariantIndex,
    built_wheels,
    clean_env,
    publish_index,
)


@pytest.fixture(scope="session")
def wheelhouse(run_tmp_path: Path) -> Path:
    """Runtime and build dependencies as local wheels (one download per run): fresh venvs install
    without the network."""
    return shared_wheelhouse(run_tmp_path, [*RUNTIME_DEPS, *BUILD_DEPS])


@pytest.fixture(scope="session")
def variant_index(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Iterator[VariantIndex]:
    base = tmp_path_factory.mktemp("e2e")
    root = base / "index"
    root.mkdir()
    with serve(root) as server:
        sdist = build_sdist(REPO, base / "sdist", f"{server.url}/simple", env=clean_env())
        wheels = built_wheels(E2E_TARGETS)
        publish_index(root, list(wheels.values()), sdist)
        yield VariantIndex(root, server, wheels, sdist, wheelhouse)
