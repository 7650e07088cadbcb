"""Data plane (issue 12 finding 1): the core's TCP connections prove the job
secret before Gloo gets them, so stray connections - before the real peer,
during init() or during collectives - neither take a peer's place nor see
data. workers/tcp_peer.py plays one rank in Python (hmac/hashlib: an
independent implementation of the handshake) against the core's other rank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.native_builds import Build

from .native_helpers import WORKERS, launch

pytestmark = pytest.mark.slow  # builds (or reuses) the gloo variant


def _peer(build: Build, role: str, attack: str, tmp_path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(WORKERS / "tcp_peer.py"), role, attack],
        cwd=tmp_path,
        env=build.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_core_links_no_gloo_and_libcrypto(gloo_build: Build) -> None:
    """The gloo controller's data plane is the core's own: no Gloo code in the module
    (neither a libgloo it needs nor a static copy's symbols), OpenSSL's libcrypto for the HMAC."""
    (core,) = (gloo_build.stage / "hvd_selector").glob("_core*.so")
    needed = subprocess.run(["readelf", "-d", str(core)], capture_output=True, text=True, check=True).stdout
    assert "libcrypto.so" in needed and "gloo" not in needed.lower(), needed
    symbols = subprocess.run(["nm", "-DC", str(core)], capture_output=True, text=True, check=True).stdout
    assert "HMAC" in symbols and "gloo::" not in symbols


@pytest.mark.parametrize("role", ["listen", "connect"])
def test_a_peer_with_the_secret_is_accepted(gloo_build: Build, role: str, tmp_path: Path) -> None:
    """Python's HMAC-SHA256 and the core's agree, in both directions."""
    assert _peer(gloo_build, role, "none", tmp_path) == "ok 0 -"


@pytest.mark.parametrize(
    ("attack", "count"),
    [("garbage", 3), ("idle", 3), ("wrong-key", 3), ("replay", 3), ("flood", 200)],
)
def test_strays_before_the_real_peer_do_not_take_its_place(
    gloo_build: Build, attack: str, count: int, tmp_path: Path
) -> None:
    """The DoS of Gloo's own listener: strays reach rank 0 first and stay;
    init() still pairs the real rank 1, and each stray got only the hello."""
    result, strays, received = _peer(gloo_build, "listen", attack, tmp_path).split()
    assert (result, int(strays)) == ("ok", count)
    # flood: a stray still in the kernel's queue when the listener closes gets a reset, not the hello
    assert set(received.split(",")) <= ({"40", "0"} if attack == "flood" else {"40"})


def test_a_listener_without_the_secret_is_refused(gloo_build: Build, tmp_path: Path) -> None:
    """The connecting rank checks the listener's proof too (mutual), then retries."""
    assert _peer(gloo_build, "connect", "impostor-listener", tmp_path) == "ok 1 -"


def test_only_strangers_time_out_naming_the_missing_rank(gloo_build: Build, tmp_path: Path) -> None:
    out = _peer(gloo_build, "listen", "only-strangers", tmp_path)
    assert out.startswith("timeout init: rank(s) 1 did not connect to rank 0's data listener"), out
    assert "3 other connection(s) were refused" in out


def test_a_frame_the_collective_did_not_expect_is_a_mismatch(gloo_build: Build, tmp_path: Path) -> None:
    """After the handshake every message is framed (u64 sequence, u64 length); a peer whose
    frame disagrees with the collective fails it with MismatchError, never data read as data."""
    result, seq, length, message = _peer(gloo_build, "listen", "bad-frame", tmp_path).split(" ", 3)
    # Message 0 carried init()'s settings records; the barrier's agreement round is message 1,
    # whose messages may be shorter than their room (each rank sizes its block to its call):
    # one byte more than a whole block is read and refused, not taken as a summary.
    assert (result, seq) == ("mismatch", "1") and int(length) > 0
    assert message == "agreement: rank 1 sent a round this build cannot read (another release of hvd_selector?)"


def test_a_peers_negative_alltoall_split_is_refused_before_any_copy(gloo_build: Build, tmp_path: Path) -> None:
    """Split counts come from every peer: a negative one is one ValueError naming the rank, never a copy
    sized from it."""
    out = _peer(gloo_build, "listen", "negative-split", tmp_path)
    assert out == "refused alltoall: rank 1's split for rank 0 is -1; splits must be non-negative", out


@pytest.mark.parametrize("shm", ["0", "1"])
def test_stray_connections_during_init_and_collectives(gloo_build: Build, shm: str, tmp_path: Path) -> None:
    proc = launch(gloo_build, 3, "dataplane.py", str(tmp_path), cwd=tmp_path, HVD_SELECTOR_SHM=shm)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    outcomes = [(tmp_path / f"outcome{r}.txt").read_text().split() for r in range(3)]
    for result, _, most, ports, after in outcomes:
        assert result == "ok"
        assert int(most) <= 40, "a stray received more than the listener's hello"
        assert int(ports) >= 1, "the attack found the rank's ports"
        assert int(after) == 0, "nothing listens once the mesh is up"
    assert int(outcomes[0][1]) >= 1, "rank 0's listener was attacked during init"
