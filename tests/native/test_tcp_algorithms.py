"""The gloo controller's algorithms (native/src/tcp_algorithms.h): the rule
and its crossovers, the connections each rank opens, and exact results on
both sides of every crossover at 2..12 ranks over TCP."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from devtools.native_builds import REPO, Build

from .native_helpers import launch

HARNESS = Path(__file__).resolve().parent / "tcp_rule" / "print_rule.cpp"
SOURCES = ["tcp_algorithms.cpp", "tcp_exchange.cpp", "common.cpp", "kernels_cpu.cpp"]
KIB, MIB = 1 << 10, 1 << 20

# The documented crossovers (docs/reference/transport.md, "Algorithms"):
# (collective, ranks, bytes just below, algorithm below, algorithm at and above).
CROSSOVERS = [
    ("allreduce", 8, 64 * KIB, "recursive doubling", "recursive halving + doubling"),
    ("allreduce", 12, 64 * KIB, "recursive doubling", "recursive halving + doubling"),
    ("allreduce", 12, 4 * MIB, "recursive halving + doubling", "ring"),
    ("allreduce", 64, 4 * MIB, "recursive halving + doubling", "recursive halving + doubling"),
    ("allgather", 5, 16 * MIB, "bruck", "ring"),
    ("broadcast", 7, 256 * KIB, "binomial tree", "scatter + allgather"),
    ("broadcast", 2, 256 * KIB, "binomial tree", "binomial tree"),
]


@pytest.fixture(scope="module")
def rule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("rule") / "print_rule"
    src = REPO / "native" / "src"
    subprocess.run(
        ["g++", "-std=c++17", "-O1", f"-I{REPO / 'native' / 'include'}", f"-I{src}", str(HARNESS)]
        + [str(src / s) for s in SOURCES]
        + ["-o", str(exe)],
        check=True,
        timeout=300,
    )
    return exe


def _ask(exe: Path, *args: object) -> str:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(("collective", "ranks", "at", "below", "above"), CROSSOVERS)
def test_the_rule_switches_at_the_documented_crossover(
    rule: Path, collective: str, ranks: int, at: int, below: str, above: str
) -> None:
    assert _ask(rule, "rule", collective, at - 1, ranks).strip() == below
    assert _ask(rule, "rule", collective, at, ranks).strip() == above


@pytest.mark.parametrize("ranks", [2, 3, 5, 8, 12, 48, 64, 100, 256, 512])
def test_each_rank_connects_to_a_few_peers_symmetrically(rule: Path, ranks: int) -> None:
    """At most 3 ceil(log2 p) peers, q a peer of r iff r a peer of q, and the ring's neighbours among them."""
    peers = [{int(q) for q in line.split()} for line in _ask(rule, "peers", ranks).splitlines()]
    assert len(peers) == ranks
    bound = 3 * math.ceil(math.log2(ranks))
    for r, mine in enumerate(peers):
        assert r not in mine and len(mine) <= min(bound, ranks - 1), (r, sorted(mine))
        assert {(r + 1) % ranks, (r - 1) % ranks} <= mine
        for q in mine:
            assert r in peers[q], f"{q} is a peer of {r} but not the other way round"


@pytest.mark.slow
@pytest.mark.parametrize("np_", [2, 3, 4, 5, 7, 8, 12])
def test_exact_on_both_sides_of_every_crossover(gloo_build: Build, rule: Path, np_: int, tmp_path: Path) -> None:
    """Exact sums, maxima, gathers and broadcasts; bitwise equal order-sensitive sums on every rank;
    a socket to each of the algorithms' peers after init(), to every rank after the first alltoall."""
    proc = launch(gloo_build, np_, "algorithms.py", str(tmp_path), cwd=tmp_path, timeout=600, HVD_SELECTOR_SHM="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_ranks_agree(tmp_path, np_)
    peers = _ask(rule, "peers", np_).splitlines()
    for r in range(np_):
        before, after = json.loads((tmp_path / f"rank{r}.json").read_text())["sockets"]
        assert (before, after) == (len(peers[r].split()), np_ - 1), f"rank {r}"


def check_ranks_agree(out_dir: Path, np_: int) -> None:
    """Every rank's exact checks passed and its order-sensitive results equal rank 0's, bit for bit."""
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(np_)]
    for r, result in enumerate(ranks):
        assert not result["failures"], f"rank {r}: {result['failures']}"
        assert result["digests"] == ranks[0]["digests"], f"rank {r}'s bytes differ from rank 0's"
    assert ranks[0]["digests"]


def _scale(build: Build, np_: int, scenario: str, tmp_path: Path, **env: str) -> list[dict]:
    """workers/scale.py SCENARIO on np_ ranks; each rank's outcome (None where a rank wrote none)."""
    proc = launch(build, np_, "scale.py", str(tmp_path), scenario, cwd=tmp_path, timeout=600, **env)
    outcomes = []
    for r in range(np_):
        path = tmp_path / f"rank{r}.json"
        outcomes.append(json.loads(path.read_text()) if path.exists() else None)
    if scenario != "die":
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return outcomes


@pytest.mark.slow
def test_past_the_open_files_limit_alltoall_fails_in_one_line(gloo_build: Build, tmp_path: Path) -> None:
    """alltoall's extra connections need descriptors: past the limit every rank says so, naming ulimit -n."""
    for r, outcome in enumerate(_scale(gloo_build, 8, "fd_limit", tmp_path, HVD_SELECTOR_SHM="0")):
        assert outcome and outcome["error"] == "ValueError", (r, outcome)
        assert "more data connections but may open only" in outcome["message"], outcome
        assert "ulimit -n" in outcome["message"] and "\n" not in outcome["message"]


@pytest.mark.slow
def test_a_death_at_64_ranks_ends_every_rank_with_peer_failure(gloo_build: Build, tmp_path: Path) -> None:
    """Only a few ranks are connected to the dead one; the others learn it from their peers giving up
    (they shut their connections down), well within the timeout, as PeerFailureError."""
    outcomes = _scale(gloo_build, 64, "die", tmp_path, HVD_SELECTOR_SHM="0", HVD_SELECTOR_TIMEOUT="60")
    victim = 64 // 2 + 1
    assert outcomes[victim] is None
    for r, outcome in enumerate(outcomes):
        if r == victim:
            continue
        assert outcome is not None, f"rank {r} wrote no outcome"
        assert outcome.get("error") == "PeerFailureError", (r, outcome)
        assert outcome["seconds"] < 30, (r, outcome)


def test_agreement_round_is_compact_and_still_names_the_difference(gloo_build: Build, tmp_path: Path) -> None:
    """Over the network a collective's agreement round carries 16 bytes per rank (a digest and the
    first dimension), not a whole descriptor and a 1 KiB slot (1128 bytes a message before); ranks
    that differ still fail with one identical message naming the difference."""
    np_ = 3
    proc = launch(gloo_build, np_, "agreement.py", str(tmp_path), cwd=tmp_path, timeout=180, HVD_SELECTOR_SHM="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(np_)]
    for r, result in enumerate(results):
        # A 4-byte broadcast at 3 ranks: the compact round (two Bruck messages of one 16-byte
        # summary) and at most two tree messages, each with its 16-byte frame: 104 bytes on
        # the root. Whole descriptors would be 280, and a descriptor with a 1 KiB slot 2328.
        assert 0 < result["per_call"] < 160, (r, result["per_call"])
        assert result["ragged_ok"], r
    for name, fragment in [("root", "root="), ("op", "op="), ("row", "[*,")]:
        texts = {result["errors"][name] for result in results}
        assert len(texts) == 1, texts
        text = texts.pop()
        assert "ranks disagree" in text and fragment in text, text


@pytest.mark.parametrize("np_", [3, 4])
def test_a_small_collective_is_one_round_with_its_agreement(gloo_build: Build, np_: int, tmp_path: Path) -> None:
    """A 4 KiB allreduce, allgather or broadcast rides in the agreement round (state.h, agree()): each rank
    sends one message per Bruck round, ceil(log2 p) in all, instead of the agreement round's and then the
    data's (main sends 3 for a 4 KiB allreduce at 3 ranks)."""
    proc = launch(gloo_build, np_, "agreement.py", str(tmp_path), cwd=tmp_path, timeout=180, HVD_SELECTOR_SHM="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rounds = math.ceil(math.log2(np_))
    for r in range(np_):
        segments = json.loads((tmp_path / f"rank{r}.json").read_text())["segments"]
        for name, per_call in segments.items():
            assert per_call <= rounds + 0.2, (r, name, per_call)
