"""Data plane (issue 12 finding 1): each Gloo pair proves it belongs to the
job; stray local connections during collectives neither break nor join it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from devtools.native_builds import Build

from .native_helpers import launch, source_module

dataplane = source_module("_dataplane")


def _loopback(tags: dict[int, bytes], size: int) -> Callable[[np.ndarray], np.ndarray]:
    """An alltoall as the pairs would deliver it to rank 0 (row q: what q sent)."""

    def alltoall(send: np.ndarray) -> np.ndarray:
        return np.frombuffer(b"".join(tags[q] for q in range(size)), dtype=np.int64).reshape(size, 4)

    return alltoall


def test_pairs_that_know_the_secret_pass() -> None:
    key, nonce = b"s" * 32, b"n" * 16
    tags = {q: dataplane.tag(key, nonce, q, 0) for q in range(3)}
    assert dataplane.prove_pairs(_loopback(tags, 3), key, nonce, 0, 3) == []


@pytest.mark.parametrize(
    "forged",
    [
        b"\0" * 32,  # garbage
        "other job",  # right ranks, another init's nonce (a replay)
        "other pair",  # this job's tag for another pair
    ],
)
def test_a_stranger_is_named(forged: object) -> None:
    key, nonce = b"s" * 32, b"n" * 16
    tags = {q: dataplane.tag(key, nonce, q, 0) for q in range(3)}
    if forged == "other job":
        tags[2] = dataplane.tag(key, b"m" * 16, 2, 0)
    elif forged == "other pair":
        tags[2] = dataplane.tag(key, nonce, 1, 0)
    else:
        assert isinstance(forged, bytes)
        tags[2] = forged
    assert dataplane.prove_pairs(_loopback(tags, 3), key, nonce, 0, 3) == [2]


@pytest.mark.slow
@pytest.mark.parametrize("shm", ["0", "1"])
def test_stray_connections_during_collectives(gloo_build: Build, shm: str, tmp_path: Path) -> None:
    proc = launch(gloo_build, 2, "dataplane.py", str(tmp_path), cwd=tmp_path, HVD_SELECTOR_SHM=shm)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for r in range(2):
        result, ports, held = (tmp_path / f"outcome{r}.txt").read_text().split()
        assert result == "ok"
        assert int(ports) >= 1, "the attack found the rank's ports"
        assert int(held) == 0, "nothing listens once the mesh is up"
