"""The intra-host shared-memory transport: every op and dtype over shm alone,
shm mixed with "remote" ranks (forced onto the network by HVD_SELECTOR_HOST_ID),
a rank killed mid-collective, two jobs at once, and what the segment looks like.

The transport jobs here move numpy's dtypes only (every element size, float16 for the
2-byte floats); torch's tensors and bfloat16 are test_collectives' (2 and 4 ranks, every
build, shared memory by default) and test_shm_off's (TCP): importing torch would cost each
rank of these 4-rank jobs about 2.5 s of CPU."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from devtools.native_builds import Build, run_argv

from .native_helpers import WORKERS, launch
from .test_collectives import check_every_op_and_dtype

pytestmark = pytest.mark.slow


def _segments() -> set[str]:
    """Everything in /dev/shm (the transport must never leave anything there)."""
    return {p.name for p in Path("/dev/shm").iterdir()}


def _left_in_shm(before: set[str], wait: float = 60) -> set[str]:
    """The /dev/shm entries made since ``before`` that stay. A job running meanwhile in
    another process (an MPI test on the other xdist worker) may hold an entry for a while,
    and its own end removes it; one this test's ended job left is never removed. Bounded."""
    deadline = time.monotonic() + wait
    while (new := _segments() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    return new


@pytest.mark.parametrize(
    "np_,hosts,slot,pair01,pair02",
    [
        (2, 1, "", "shm", None),
        (4, 1, "131072", "shm", "shm"),  # small buffers: large tensors cross many chunks
        (4, 2, "131072", "shm", "gloo tcp"),
        (4, 3, "", "shm", "gloo tcp"),
    ],
)
def test_every_op_over_shm_and_hierarchy(
    gloo_build: Build, np_: int, hosts: int, slot: str, pair01: str, pair02: str | None, tmp_path: Path
) -> None:
    before = _segments()
    env = {"HVD_SELECTOR_SHM_SLOT": slot} if slot else {}
    check_every_op_and_dtype(gloo_build, np_, tmp_path, hosts, with_torch=False, **env)
    transport = (tmp_path / "transport0.txt").read_text()
    assert f"0-1 {pair01}" in transport, transport
    if pair02:
        assert f"0-2 {pair02}" in transport, transport
    assert not _left_in_shm(before)


def test_mpi_build_uses_shm_between_local_ranks(openmpi_build: Build, tmp_path: Path) -> None:
    """Open MPI here: MPICH's ch4:ucx busy-polls while it waits, so with more ranks than cores this
    job cost 13 CPU-s and 7 s with MPICH against 2 CPU-s and 1.4–2.9 s with Open MPI. The MPICH build
    moves the same ops between hosts in the next test, one rank a core."""
    check_every_op_and_dtype(openmpi_build, 4, tmp_path, 2, with_torch=False)
    transport = (tmp_path / "transport0.txt").read_text()
    assert "0-1 shm" in transport and "0-2 mpi" in transport, transport


def test_mpich_build_moves_every_op_between_hosts(mpich_build: Build, tmp_path: Path) -> None:
    check_every_op_and_dtype(mpich_build, 2, tmp_path, 2, with_torch=False)
    assert (tmp_path / "transport0.txt").read_text().endswith("; 0-1 mpi")


def test_shm_off(gloo_build: Build, tmp_path: Path) -> None:
    check_every_op_and_dtype(gloo_build, 2, tmp_path, HVD_SELECTOR_SHM="0")  # torch's tensors and bfloat16 over TCP
    assert (tmp_path / "transport0.txt").read_text() == "gloo tcp; 0-1 gloo tcp"


@pytest.mark.parametrize(
    "name,value,text",
    [
        ("HVD_SELECTOR_SHM", "maybe", "HVD_SELECTOR_SHM=maybe must be 0 or 1"),
        ("HVD_SELECTOR_SHM_SLOT", "4096", "HVD_SELECTOR_SHM_SLOT=4096 must be a byte count from 131072"),
        ("HVD_SELECTOR_SHM_DIRECT", "yes", "HVD_SELECTOR_SHM_DIRECT=yes must be 0, 1, all or auto"),
    ],
)
def test_bad_shm_setting_is_one_line(gloo_build: Build, name: str, value: str, text: str, tmp_path: Path) -> None:
    proc = launch(gloo_build, 2, "shm.py", str(tmp_path), "plain", cwd=tmp_path, **{name: value})
    assert proc.returncode != 0
    assert text in proc.stdout + proc.stderr


def test_segment_is_private_and_nameless(gloo_build: Build, tmp_path: Path) -> None:
    """One anonymous memfd mapped by both ranks, mode 0600, no name in /dev/shm,
    and no descriptor left open once init() returns (nobody can open it via /proc)."""
    before = _segments()
    proc = launch(gloo_build, 2, "shm.py", str(tmp_path), "inspect", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen = [(tmp_path / f"segment{r}.txt").read_text().split("|") for r in range(2)]
    assert seen[0][2] == seen[1][2], "both ranks map the same memory"
    for path, mode, _, fds in seen:
        assert path == "/memfd:hvd-selector (deleted)"
        assert mode == "0o600" and fds == "fds=0"
    assert not _left_in_shm(before)


def test_rank_killed_mid_collective(gloo_build: Build, tmp_path: Path) -> None:
    before = _segments()
    start = time.monotonic()
    proc = launch(gloo_build, 4, "shm.py", str(tmp_path), "kill", cwd=tmp_path, HVD_SELECTOR_TIMEOUT="10")
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    for r in (0, 1, 3):
        outcome = (tmp_path / f"outcome{r}.txt").read_text()
        kind, seconds, message = outcome.split(" ", 2)
        assert kind in ("PeerFailureError", "CollectiveTimeoutError"), outcome
        assert float(seconds) < 10, outcome
        assert "\n" not in message
    assert not _left_in_shm(before)


def test_two_jobs_at_once(gloo_build: Build, tmp_path: Path) -> None:
    """Each job's sums only ever contain its own ranks' values, while the other job reduces too (the jobs
    start their 150 allreduces together: workers/shm.py)."""
    jobs = []
    for job in ("1", "2"):
        out = tmp_path / job
        out.mkdir()
        cmd = run_argv(4, WORKERS / "shm.py", str(out), "job", job)
        env = gloo_build.env()
        jobs.append(subprocess.Popen(cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in jobs:
        output, _ = p.communicate(timeout=180)
        assert p.returncode == 0, output.decode()[-2000:]
    for job in ("1", "2"):
        for r in range(4):
            assert (tmp_path / job / f"outcome{r}.txt").read_text() == "ok", (job, r)


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_an_mpi_job_with_a_stopped_rank_ends_instead_of_hanging_in_finalize(
    impl: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 36: rank 1 is SIGSTOPped; rank 0 raises CollectiveTimeoutError and then hung for good in
    MPI_Finalize (Open MPI's fence) from the exit handlers. Now the process ends with MPI_Abort, saying
    so in one line, and mpiexec stops the stopped rank."""
    build = request.getfixturevalue(f"{impl}_build")
    start = time.monotonic()
    try:
        proc = launch(build, 2, "shm.py", str(tmp_path), "stop", cwd=tmp_path, timeout=90, HVD_SELECTOR_TIMEOUT="5")
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the job hung after the collective failed: {exc.stderr!r}") from None
    assert proc.returncode != 0, proc.stderr
    assert "CollectiveTimeoutError" in proc.stderr, proc.stderr
    line = "so MPI cannot finalise with it: ending the job with MPI_Abort(MPI_COMM_WORLD, 1)"
    assert [row for row in proc.stderr.splitlines() if line in row], proc.stderr
    assert time.monotonic() - start < 90


RULE_SLOT = 131072  # small slots: the sizes below cross many pieces, and the rule's crossovers at 512/256 KiB


def _direct_by_rule(collective: str, elements: int, ranks: int) -> bool:
    """The rule of shm_backend.cpp (Route), in float32 elements: 4 slots of an allreduce or
    broadcast buffer, 2 slots of an allgather's largest part."""
    if collective == "allgather":
        return 4 * -(-elements // ranks) >= 2 * RULE_SLOT
    return 4 * elements >= 4 * RULE_SLOT


@pytest.mark.parametrize(
    "np_,direct,elements",
    [
        # float32 elements: 1 and 7 (odd), the inline limit, one slot +1, just below, at and just
        # above the rule's 4 slots (131072 elements) and its allgather parts of 2 slots at 3 and
        # 5 ranks (196606, 327676), an odd size over many pieces and blocks
        (3, "1", [1, 7, 16385, 32769, 131071, 131072, 131073, 196605, 196606, 262147]),
        (5, "1", [7, 131071, 131072, 327675, 327676]),
        (5, "all", [1, 7, 16385, 32769, 65537]),  # direct reads at every size, odd shares
        (3, "0", [7, 32769, 131073, 262147]),  # slots only, whatever the size
        (3, "auto", [7, 131071, 131072, 262147]),  # the default: the rule, or slots only, as measured at init
    ],
)
def test_shm_route_rule(gloo_build: Build, np_: int, direct: str, elements: list[int], tmp_path: Path) -> None:
    """Each collective takes the route the rule names for its size (direct reads, seen as
    process_vm_readv calls in an strace of the job, exactly from the rule's crossover on), and
    every rank's result is bitwise the rank-ordered numpy result on either route."""
    strace = shutil.which("strace")
    assert strace, "strace is needed (.ci/apt-packages.txt)"
    trace = tmp_path / "trace.txt"
    argv = [strace, "-f", "-qq", "-o", str(trace), "-e", "trace=process_vm_readv,access,faccessat,faccessat2"]
    argv += run_argv(np_, WORKERS / "shm.py", str(tmp_path), "rule", ",".join(map(str, elements)))
    env = gloo_build.env(HVD_SELECTOR_SHM_SLOT=str(RULE_SLOT), HVD_SELECTOR_SHM_DIRECT=direct)
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for r in range(np_):
        assert (tmp_path / f"outcome{r}.txt").read_text() == "ok", r
    # Direct reads per marked collective (a barrier closes each, so every read follows its marker).
    reads: dict[str, int] = {}
    marker = None
    for line in trace.read_text().splitlines():
        if found := re.search(r'"/hvd-route/([^"]+)"', line):
            marker = found.group(1)
            reads.setdefault(marker, 0)
        elif "process_vm_readv(" in line and marker:
            reads[marker] += 1
    points = [(c, n) for n in elements for c in ("allreduce", "allreduce-max", "allgather", "broadcast")]
    seen = {(c, n): reads[f"{c}-{n}"] > 0 for c, n in points}
    by_rule = {(c, n): _direct_by_rule(c.removesuffix("-max"), n, np_) for c, n in points}
    if direct == "auto":  # the host's copy speeds choose the rule ("1") or the slots ("0"), for every size alike
        assert seen == by_rule or not any(seen.values()), reads
    else:
        assert seen == {point: direct == "all" or (direct == "1" and by_rule[point]) for point in points}, reads
