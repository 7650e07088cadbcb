"""What init() checks about the job itself, with real launchers: a split job (torchrun or the other
MPI's mpiexec starting an MPI build), settings that differ between ranks, a peer's bytes that no
rank of this build would send, and init() after shutdown() on MPI builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.native_builds import Build

from .native_helpers import WORKERS, launch

pytestmark = pytest.mark.slow
WORKER = WORKERS / "job_checks.py"
OTHER_MPIEXEC = {"mpich": ["mpirun.openmpi", "--oversubscribe", "-x", "PYTHONPATH"], "openmpi": ["mpiexec.mpich"]}


def outcomes(out: Path, np_: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(np_)]


def _split(build: Build, launcher: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = build.env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = [*launcher, str(WORKER), str(tmp_path), "split"]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
@pytest.mark.parametrize("how", ["torchrun", "other-mpiexec"])
def test_a_split_job_fails_at_init_naming_both_sizes(
    impl: str, how: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Before: two jobs of one rank each, both exiting 0. Now every process names the launcher's
    size, MPI's, and the mpiexec this build needs."""
    build = request.getfixturevalue(f"{impl}_build")
    if how == "torchrun":
        # --log-dir: without it torchrun's agent leaves a torchelastic_* folder in /tmp
        logs = ["--log-dir", str(tmp_path / "torchrun-logs")]
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *logs]
        said = "torchrun started this process as rank {r} of 2 (WORLD_SIZE=2)"
    else:
        launcher = [*OTHER_MPIEXEC[impl], "-np", "2", sys.executable]
        said = {
            "mpich": "Open MPI's mpirun started this process as rank {r} of 2 (OMPI_COMM_WORLD_SIZE=2)",
            "openmpi": "mpiexec (PMI) started this process as rank {r} of 2 (PMI_SIZE=2)",
        }[impl]
    proc = _split(build, launcher, tmp_path)
    assert (tmp_path / "rank1.json").exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    for r, outcome in enumerate(outcomes(tmp_path, 2)):
        assert outcome.get("error") == "JobEnvError", outcome  # before: "result": 1 on both
        message = outcome["message"]
        assert said.format(r=r) in message and "a communicator of 1 rank(s)" in message, message
        assert f"/usr/bin/mpiexec.{impl} -np 2" in message and "\n" not in message, message


DRIFT = [
    ("gloo", "HVD_SELECTOR_SHM=0", "HVD_SELECTOR_SHM differs between ranks (1 on ranks 0,2; 0 on rank 1)"),
    ("mpich", "HVD_SELECTOR_SHM=0", "HVD_SELECTOR_SHM differs between ranks (1 on ranks 0,2; 0 on rank 1)"),
    ("openmpi", "HVD_SELECTOR_SHM_SLOT=262144", "HVD_SELECTOR_SHM_SLOT differs between ranks (1048576 on ranks"),
    ("gloo", "HOROVOD_FUSION_THRESHOLD=1000", "HOROVOD_FUSION_THRESHOLD (fusion_threshold()) differs between ranks"),
    ("gloo", "HVD_SELECTOR_SHM=maybe", "rank 1: HVD_SELECTOR_SHM=maybe must be 0 or 1"),
    ("mpich", "HOROVOD_FUSION_THRESHOLD=64MB", "rank 1: HOROVOD_FUSION_THRESHOLD='64MB' is not a number of bytes"),
]


@pytest.mark.parametrize("impl,setting,text", DRIFT, ids=[f"{i}-{s}" for i, s, _ in DRIFT])
def test_a_setting_set_on_one_rank_only_fails_init_on_every_rank(
    impl: str, setting: str, text: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Before: SIGSEGV in hvd::shape_string (MPI), gloo::EnforceNotMet in Gloo's thread (Gloo)."""
    build = request.getfixturevalue(f"{impl}_build")
    launch(build, 3, "job_checks.py", str(tmp_path), "drift", setting, cwd=tmp_path, timeout=120)
    for outcome in outcomes(tmp_path, 3):
        assert outcome.get("error") == "ValueError", outcome
        assert text in outcome["message"] and "\n" not in outcome["message"], outcome


def mpi4py_build(request: pytest.FixtureRequest) -> Build:
    """The MPI build of the MPI mpi4py was compiled against (they share one process or one job)."""
    pytest.importorskip("mpi4py")
    probe = "from mpi4py import MPI; print(MPI.Get_library_version())"
    version = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60).stdout
    return request.getfixturevalue("openmpi_build" if "Open MPI" in version else "mpich_build")


@pytest.mark.parametrize(
    "mode,text",
    [
        ("forged_settings", "rank 1: " + "A" * 239),
        ("forged_descriptor", "but rank 1 called nothing this build can read"),
    ],
)
def test_a_peer_s_counts_and_lengths_are_never_trusted(
    request: pytest.FixtureRequest, mode: str, text: str, tmp_path: Path
) -> None:
    """Rank 1 is mpi4py speaking the core's wire format: a settings text with no end, a descriptor
    with ndim 2^30 and dimensions of 2^62. Rank 0 gets one line (before: a crash reading past them)."""
    proc = launch(mpi4py_build(request), 2, "job_checks.py", str(tmp_path), mode, cwd=tmp_path, HVD_SELECTOR_SHM="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads((tmp_path / "rank0.json").read_text())
    assert outcome.get("error") in ("ValueError", "MismatchError"), outcome
    assert text in outcome["message"] and "\n" not in outcome["message"], outcome
    if mode == "forged_settings":
        assert outcome["message"].endswith("A" * 239), outcome  # bounded by the record, never past it


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_an_mpi_build_initialises_again_after_shutdown(
    impl: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Before: "MPI_Comm_dup called after MPI_FINALIZE" aborted the process on the second init()."""
    build = request.getfixturevalue(f"{impl}_build")
    proc = launch(build, 2, "job_checks.py", str(tmp_path), "reinit", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [o.get("result") for o in outcomes(tmp_path, 2)] == [[2.0, 2.0, 2.0]] * 2


def test_init_after_mpi4py_finalised_mpi_is_one_line(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    proc = launch(mpi4py_build(request), 1, "job_checks.py", str(tmp_path), "finalized", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = outcomes(tmp_path, 1)[0]
    assert outcome.get("error") == "UnavailableError", outcome
    assert "MPI was finalised in this process" in outcome["message"], outcome
    assert os.linesep not in outcome["message"]
