"""64 ranks over four network-namespace hosts (16 each, started over ssh by ``hvd-selector run -H``):
every collective exact, the order-sensitive sum bitwise equal on every rank, shared memory within each
host and the host leaders' own TCP connections between hosts. Small tensors: 64 ranks share 2 cores."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.native_builds import REPO, Build

from . import netns
from .conftest import _cluster
from .test_multihost import launcher_argv, run_job

pytestmark = pytest.mark.slow
WORKER = REPO / "tests" / "native" / "workers" / "scale.py"


@pytest.fixture()
def five_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.Cluster]:
    """The launcher's host and four rank hosts; torn down even on failure."""
    yield from _cluster(tmp_path_factory, 5)


def test_64_ranks_on_four_hosts_are_exact(five_hosts: netns.Cluster, v3_build: Build, tmp_path: Path) -> None:
    hosts = ",".join(f"{h.address}:16" for h in five_hosts.hosts[1:])
    argv = launcher_argv(five_hosts, 64, hosts, sys.executable, str(WORKER), str(tmp_path), "exact", "namespaces")
    proc = run_job(five_hosts, v3_build, argv, timeout=600, HVD_SELECTOR_TIMEOUT="300", OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    outcomes = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(64)]
    for r, outcome in enumerate(outcomes):
        assert all(outcome["ok"].values()), (r, outcome["ok"])
        assert outcome["digest"] == outcomes[0]["digest"], f"rank {r}'s bytes differ from rank 0's"
        assert outcome["transport"].startswith("hierarchical: shm within 4 hosts, gloo tcp between host leaders")
    assert five_hosts.wait_clean(20) == {}
