"""Bad input gives a clear Python exception on every surviving rank, in bounded time."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.native_builds import Build

from .native_helpers import launch

pytestmark = pytest.mark.slow


Outcomes = dict[int, dict[str, dict[str, Any]]]  # rank -> scenario -> what its call did


def _run(
    build: Build, scenarios: str, tmp_path: Path, np_: int = 2, timeout: str = "5", **env: str
) -> tuple[subprocess.CompletedProcess[str], Outcomes, float]:
    """One job of ``np_`` ranks running the comma-separated ``scenarios`` in turn (workers/errors.py)."""
    start = time.monotonic()
    proc = launch(
        build,
        np_,
        "errors.py",
        str(tmp_path),
        scenarios,
        cwd=tmp_path,
        timeout=120,
        HVD_SELECTOR_TIMEOUT=timeout,
        **env,
    )
    elapsed = time.monotonic() - start
    outcomes = {}
    for r in range(np_):
        path = tmp_path / f"rank{r}.json"
        if path.exists():
            outcomes[r] = json.loads(path.read_text())
    return proc, outcomes, elapsed


def _one_job(build: Build, scenarios: list[str], tmp_path: Path, np_: int, **env: str) -> Outcomes:
    """Scenarios that each end in an exception, run one after another in one job (a rank and
    its start-up serve them all, as a script that catches its errors and goes on), then a Sum
    allreduce that must still work (the test_the_job_goes_on_* tests)."""
    proc, outcomes, _ = _run(build, ",".join([*scenarios, "sum"]), tmp_path, np_=np_, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(outcomes) == list(range(np_))
    for rank, done in outcomes.items():
        assert list(done) == [*scenarios, "sum"], f"rank {rank} got no further than {list(done)}"
    return outcomes


MISMATCH = {
    "shape": "float32[3,2] op=Average but rank 1 called allreduce float32[4,2]",
    "dtype": "float32[4] op=Average but rank 1 called allreduce float64[4]",
    "op": "op=Sum but rank 1 called allreduce float32[4] op=Max",
    "kind": "rank 0 called allreduce float64[4] op=Average but rank 1 called broadcast float64[4] root=0",
    "gather_dims": "allgather float64[*,3] but rank 1 called allgather float64[*,4]",
    "big_shape": "float32[65536] op=Average but rank 1 called allreduce float32[65537]",
    "chunk_shape": "float32[4096] op=Average but rank 1 called allreduce float32[12288]",
}

LOCAL_BAD_INPUT = {
    "noncontiguous": ("ValueError", "not C-contiguous; pass np.ascontiguousarray(x) or x.contiguous()"),
    "unsupported": ("TypeError", "unsupported dtype complex64; supported: float16, bfloat16"),
    "grouped_noncontiguous": ("ValueError", "not C-contiguous; pass np.ascontiguousarray(x)"),
    "grouped_unsupported": ("TypeError", "unsupported dtype complex64; supported: float16, bfloat16"),
}


@pytest.fixture(scope="module")
def mismatches(any_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Every mismatch on 2 ranks of each build, in one job."""
    return _one_job(any_build, sorted(MISMATCH), tmp_path_factory.mktemp("mismatch"), np_=2)


@pytest.fixture(scope="module")
def mismatches_over_tcp(gloo_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Every mismatch on 3 ranks of the gloo build over TCP only, in one job."""
    return _one_job(gloo_build, sorted(MISMATCH), tmp_path_factory.mktemp("tcp"), np_=3, HVD_SELECTOR_SHM="0")


@pytest.fixture(scope="module")
def local_bad_input(gloo_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Every local bad input on 2 ranks of the gloo build, in one job."""
    return _one_job(gloo_build, sorted(LOCAL_BAD_INPUT), tmp_path_factory.mktemp("local"), np_=2)


@pytest.mark.parametrize("scenario", sorted(MISMATCH))
def test_mismatch_across_ranks(mismatches: Outcomes, scenario: str) -> None:
    for done in mismatches.values():
        outcome = done[scenario]
        assert outcome["error"] == "MismatchError", outcome
        assert "HorovodInternalError" in outcome["mro"]
        assert MISMATCH[scenario] in outcome["message"], outcome["message"]
        assert "\n" not in outcome["message"]


@pytest.mark.parametrize("scenario", sorted(MISMATCH))
def test_mismatch_over_tcp_where_payloads_ride_in_the_agreement_round(
    mismatches_over_tcp: Outcomes, scenario: str
) -> None:
    """Over TCP a small call's payload rides in the agreement round, sized to each rank's own call: rank 0
    differing from two others still ends every rank with the same MismatchError (no hang, no data)."""
    outcomes = [done[scenario] for done in mismatches_over_tcp.values()]
    assert len({outcome["message"] for outcome in outcomes}) == 1
    for outcome in outcomes:
        assert outcome["error"] == "MismatchError", outcome
        assert MISMATCH[scenario] in outcome["message"], outcome["message"]


@pytest.mark.parametrize("scenario", sorted(LOCAL_BAD_INPUT))
def test_local_bad_input(local_bad_input: Outcomes, scenario: str) -> None:
    """A call this rank refuses before any exchange: its own error on every rank."""
    error, text = LOCAL_BAD_INPUT[scenario]
    for done in local_bad_input.values():
        outcome = done[scenario]
        assert outcome["error"] == error and text in outcome["message"], outcome


def _sums(outcomes: Outcomes) -> list[tuple[object, object]]:
    """(error, result) of the Sum allreduce each rank ran after its job's errors."""
    return [(done["sum"]["error"], done["sum"]["result"]) for done in outcomes.values()]


def test_the_job_goes_on_after_each_mismatch(mismatches: Outcomes) -> None:
    """After every mismatch above, in one job of each build, the same ranks still sum correctly."""
    assert _sums(mismatches) == [(None, 2.0)] * 2


def test_the_job_goes_on_after_each_error_over_tcp_and_after_local_bad_input(
    mismatches_over_tcp: Outcomes, local_bad_input: Outcomes
) -> None:
    assert _sums(mismatches_over_tcp) == [(None, 3.0)] * 3
    assert _sums(local_bad_input) == [(None, 2.0)] * 2


@pytest.mark.parametrize("scenario", ["die_before", "die_during"])
def test_rank_dies(gloo_build: Build, scenario: str, tmp_path: Path) -> None:
    proc, outcomes, elapsed = _run(gloo_build, scenario, tmp_path)
    assert proc.returncode == 7, (proc.returncode, proc.stderr[-2000:])  # the dead rank's code
    survivor = outcomes[0][scenario]
    assert survivor["error"] in ("PeerFailureError", "CollectiveTimeoutError"), survivor
    assert "HorovodInternalError" in survivor["mro"]
    assert "peer" in survivor["message"]
    assert survivor["seconds"] < 10
    assert elapsed < 60


def test_rank_that_never_joins_times_out(gloo_build: Build, tmp_path: Path) -> None:
    _, outcomes, _ = _run(gloo_build, "hang", tmp_path, timeout="3")
    survivor = outcomes[0]["hang"]
    assert survivor["error"] == "CollectiveTimeoutError", survivor
    assert "raise HVD_SELECTOR_TIMEOUT" in survivor["message"]
    assert 2.5 < survivor["seconds"] < 10


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_mpi_rank_death_ends_the_job(impl: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """MPI has no per-call timeout: mpiexec ends the whole job (no hang, non-zero exit)."""
    build = request.getfixturevalue(f"{impl}_build")
    proc, _, elapsed = _run(build, "die_before", tmp_path)
    assert proc.returncode != 0
    assert elapsed < 60


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_an_mpi_rank_ended_by_mpiexec_is_a_failed_job(
    impl: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Rank 0 leaves without a shutdown (exit 0) while rank 1 still works: MPICH's Hydra then ends
    rank 1 and reports 0 itself; the launcher reads what each rank's supervisor recorded instead."""
    build = request.getfixturevalue(f"{impl}_build")
    proc, _, elapsed = _run(build, "leave_early", tmp_path)
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert elapsed < 25  # rank 1 would sleep 30 s: it was ended, not waited for
    if "reported success" in proc.stderr:  # mpiexec said 0 (Hydra, most runs): the launcher names the rank
        assert "hvd-selector run: rank 1 " in proc.stderr, proc.stderr


@pytest.mark.parametrize("first", ["hvd", "mpi4py"])
def test_mpi4py_in_the_same_process(openmpi_build: Build, first: str, tmp_path: Path) -> None:
    """Either import order works and the job exits cleanly (MPI finalised once)."""
    pytest.importorskip("mpi4py")
    script = tmp_path / "both.py"
    imports = ["import hvd_selector as hvd", "from mpi4py import MPI"]
    if first == "mpi4py":
        imports.reverse()
    script.write_text(
        "import numpy as np\n" + "\n".join(imports) + "\nhvd.init()\nassert hvd.rank() == MPI.COMM_WORLD.Get_rank()\n"
        "open(f'ok{hvd.rank()}', 'w').write(str(hvd.allreduce(np.ones(2), op=hvd.Sum).tolist()))\n"
    )
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "run", "-np", "2", sys.executable, str(script)],
        cwd=tmp_path,
        env=openmpi_build.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [(tmp_path / f"ok{r}").read_text() for r in (0, 1)] == ["[2.0, 2.0]", "[2.0, 2.0]"]
