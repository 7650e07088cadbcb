"""Real multi-host jobs across network-namespace hosts: -H over ssh, the torchrun env, faults.

Each test gets three fresh namespace hosts (conftest.cluster). The launcher
runs inside host 0 and starts ranks on hosts 1 and 2 over ssh, as a user's
``hvd-selector run -H`` would; nothing leaves the namespaces.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.native_builds import REPO, Build

from .netns import Cluster, sh

pytestmark = pytest.mark.slow
WORKER = Path(__file__).resolve().parent / "workers" / "job.py"
TIMEOUT = 6  # HVD_SELECTOR_TIMEOUT for fault tests: survivors must raise within it


def launcher_argv(cluster: Cluster, np_: int, hosts: str, *command: str, extra: tuple[str, ...] = ()) -> list[str]:
    return cluster.hosts[0].exec_argv(
        sys.executable, "-m", "selector_backend", "run", "-np", str(np_), "-H", hosts,
        "--ssh-config-file", str(cluster.ssh_config), *extra, *command,
    )  # fmt: skip


def run_job(cluster: Cluster, build: Build, argv: list[str], timeout: float = 120, **env: str):
    return subprocess.run(
        argv, cwd=WORKER.parent, env=build.env(**env), capture_output=True, text=True, timeout=timeout
    )


def target(build: Build) -> str:
    return build.name.removeprefix("gloo-")


def hosts_arg(cluster: Cluster, slots: int = 2) -> str:
    return ",".join(f"{h.address}:{slots}" for h in cluster.hosts[1:])


def test_ssh_job_across_hosts(cluster: Cluster, v3_build: Build, tmp_path: Path) -> None:
    """4 ranks on two hosts: identities per host, results agree, the secret is in no command line."""
    argv = launcher_argv(cluster, 4, hosts_arg(cluster), sys.executable, str(WORKER), str(tmp_path), "reduce")
    proc = run_job(cluster, v3_build, argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [(i["rank"], i["size"], i["local_rank"], i["local_size"]) for i in infos] == [
        (0, 4, 0, 2), (1, 4, 1, 2), (2, 4, 0, 2), (3, 4, 1, 2),
    ]  # fmt: skip
    assert not any(i["secret_in_ps"] for i in infos)
    results = {(tmp_path / f"rank{r}.bin").read_bytes() for r in range(4)}
    assert len(results) == 1  # every rank holds the same bytes
    assert cluster.wait_clean(10) == {}


def test_check_prints_build_mix(cluster: Cluster, v3_build: Build) -> None:
    """``run --check`` starts the ranks, exchanges builds and prints one line per host and build."""
    a, b = (h.address for h in cluster.hosts[1:])
    proc = run_job(cluster, v3_build, launcher_argv(cluster, 3, f"{a}:2,{b}:1", "--check"), timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "job of 3 ranks:" in proc.stdout, proc.stdout
    assert f"{a}: ranks 0,1 " in proc.stdout and f"{b}: ranks 2 " in proc.stdout, proc.stdout
    assert proc.stdout.count("target=x86_64_v3") == 2 and "compatible: yes" in proc.stdout


def per_host_pythonpath(builds: dict[str, Build]) -> str:
    """A shell prefix choosing each host's installed build by HVD_SELECTOR_HOST."""
    cases = " ".join(
        f"{host}) PYTHONPATH={shlex.quote(os.pathsep.join([str(b.stage), str(REPO)]))};;" for host, b in builds.items()
    )
    return f'case "$HVD_SELECTOR_HOST" in {cases} esac; export PYTHONPATH;'


def test_heterogeneous_job_is_bitwise_identical(cluster: Cluster, pair: tuple[Build, Build], tmp_path: Path) -> None:
    """One host runs the lower target's build, the other the higher's: the same bytes as a single-build job."""
    low, high = pair
    a, b = (h.address for h in cluster.hosts[1:])
    mixed, single = tmp_path / "mixed", tmp_path / "single"
    mixed.mkdir()
    single.mkdir()
    command = (sys.executable, str(WORKER))
    choose = per_host_pythonpath({a: low, b: high})
    line = f"{choose} exec {shlex.join(command)} {shlex.quote(str(mixed))} reduce16"
    proc = run_job(cluster, high, launcher_argv(cluster, 2, f"{a}:1,{b}:1", "sh", "-c", line))
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = [json.loads((mixed / f"rank{r}.json").read_text()) for r in range(2)]
    assert [i["target"] for i in infos] == [target(low), target(high)]
    mix = infos[0]["mix"]  # what --check prints, from the exchange at init()
    assert f"{a}: ranks 0 " in mix and f"target={target(low)} " in mix, mix
    assert f"{b}: ranks 1 " in mix and f"target={target(high)} " in mix and "compatible: yes" in mix, mix
    proc = run_job(cluster, high, launcher_argv(cluster, 2, f"{a}:1,{b}:1", *command, str(single), "reduce16"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert (mixed / f"rank{r}.bin").read_bytes() == (single / f"rank{r}.bin").read_bytes(), f"rank {r}"


def test_torchrun_environment_across_hosts(cluster: Cluster, v3_build: Build, tmp_path: Path) -> None:
    """RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, Kubernetes): rank 0 serves the store."""
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    a, b = cluster.hosts[1:]
    procs = []
    for rank, host in enumerate((a, b, a, b)):
        env = v3_build.env(
            RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank // 2), LOCAL_WORLD_SIZE="2",
            MASTER_ADDR=a.address, MASTER_PORT="29512", HVD_SELECTOR_SECRET_FILE=str(secret),
        )  # fmt: skip
        argv = host.exec_argv(sys.executable, str(WORKER), str(tmp_path), "reduce")
        procs.append(subprocess.Popen(argv, cwd=WORKER.parent, env=env, stderr=subprocess.PIPE, text=True))
    try:
        errs = [p.communicate(timeout=90)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [(i["local_rank"], i["local_size"]) for i in infos] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert len({(tmp_path / f"rank{r}.bin").read_bytes() for r in range(4)}) == 1


def test_missing_secret_fails_closed(cluster: Cluster, v3_build: Build, tmp_path: Path) -> None:
    env = v3_build.env(RANK="0", WORLD_SIZE="2", MASTER_ADDR=cluster.hosts[1].address, MASTER_PORT="29513")
    argv = cluster.hosts[1].exec_argv(sys.executable, str(WORKER), str(tmp_path), "reduce")
    proc = subprocess.run(argv, cwd=WORKER.parent, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "needs a shared secret" in (tmp_path / "init-error0.txt").read_text()


def _start_hang_job(cluster: Cluster, build: Build, tmp_path: Path) -> subprocess.Popen[str]:
    argv = launcher_argv(cluster, 4, hosts_arg(cluster), sys.executable, str(WORKER), str(tmp_path), "hang")
    proc = subprocess.Popen(
        argv, cwd=WORKER.parent, env=build.env(HVD_SELECTOR_TIMEOUT=str(TIMEOUT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{r}").exists() for r in range(4)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    time.sleep(0.5)  # a few allreduces in flight
    return proc


def _finish(proc: subprocess.Popen[str], started: float) -> tuple[int, str, float]:
    try:
        _, err = proc.communicate(timeout=TIMEOUT * 4 + 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, time.monotonic() - started


def _survivors_raised(tmp_path: Path, survivors: list[int], or_stopped: bool = False) -> None:
    """Each survivor raised within the timeout (or, ``or_stopped``, was stopped by the launcher first)."""
    for r in survivors:
        path = tmp_path / f"rank{r}.json"
        if or_stopped and not path.exists():
            continue
        info = json.loads(path.read_text())
        assert info.get("error") in ("PeerFailureError", "CollectiveTimeoutError"), info
        assert info["seconds"] <= TIMEOUT + 2, info


@pytest.mark.parametrize("fault", ["rank", "host", "link"])
def test_fault(fresh_cluster: Cluster, v3_build: Build, tmp_path: Path, fault: str) -> None:
    """Rank 3 (host 2) dies, host 2 dies, or host 2's link drops: survivors raise in time, launcher names it."""
    cluster = fresh_cluster
    proc = _start_hang_job(cluster, v3_build, tmp_path)
    started = time.monotonic()
    victim = cluster.hosts[2]
    if fault == "rank":
        os.kill(int((tmp_path / "pid3").read_text()), signal.SIGKILL)
    elif fault == "host":
        cluster.kill_host(victim)
    else:
        sh("ip", "-n", victim.name, "link", "set", victim.veth, "down")
    code, err, elapsed = _finish(proc, started)
    assert code != 0, err[-3000:]
    assert f"on host {victim.address}" in err, err[-3000:]
    if fault == "rank":
        assert f"rank 3 on host {victim.address} was killed by SIGKILL" in err, err[-3000:]
        assert code == 1, err[-3000:]  # rank 0's: the lowest failed rank's code, whichever died first
    # A dead rank or host is seen at once; a cut link only after the timeout, and the launcher may
    # stop the survivors first when ssh gives up on the link (a failed rank ends the job).
    _survivors_raised(tmp_path, [0, 1], or_stopped=fault == "link")  # host 1's ranks
    assert elapsed < TIMEOUT * 3 + 10
    if fault == "link":  # the cut-off ranks time out on their own; then their host is empty too
        sh("ip", "-n", victim.name, "link", "set", victim.veth, "up")
    assert cluster.wait_clean(TIMEOUT + 10) == {}, "processes left behind"


def test_mpirun_starts_a_gloo_build_across_hosts(cluster: Cluster, v3_build: Build, tmp_path: Path) -> None:
    """Open MPI's mpirun (its orted over ssh) starts the ranks; they rendezvous through rank 0's store."""
    if not shutil.which("mpirun.openmpi"):
        pytest.skip("openmpi-bin not installed")
    a, b = (h.address for h in cluster.hosts[1:])
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    env = v3_build.env(
        HVD_SELECTOR_RENDEZVOUS_ADDR=f"{a}:29600", HVD_SELECTOR_SECRET_FILE=str(key),
        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )  # fmt: skip
    subnet = a.rsplit(".", 1)[0] + ".0/24"
    argv = cluster.hosts[0].exec_argv(
        "mpirun.openmpi", "-np", "4", "--host", f"{a}:2,{b}:2",
        "--mca", "plm_rsh_agent", f"ssh -F {cluster.ssh_config}", "--mca", "oob_tcp_if_include", subnet,
        "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", subnet,
        "-x", "PYTHONPATH", "-x", "HVD_SELECTOR_RENDEZVOUS_ADDR", "-x", "HVD_SELECTOR_SECRET_FILE",
        sys.executable, str(WORKER), str(tmp_path), "reduce",
    )  # fmt: skip
    proc = subprocess.run(argv, cwd=WORKER.parent, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [(i["rank"], i["local_rank"], i["local_size"]) for i in infos] == [
        (0, 0, 2),
        (1, 1, 2),
        (2, 0, 2),
        (3, 1, 2),
    ]
    assert len({(tmp_path / f"rank{r}.bin").read_bytes() for r in range(4)}) == 1
    assert cluster.wait_clean(10) == {}


SIGNAL_WORKER = REPO / "tests" / "native" / "workers" / "launcher_rank.py"


def start_signal_ranks(cluster: Cluster, build: Build, tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """The launcher with 4 of launcher_rank.py's ``signals`` ranks on the hosts (grace 2 s), once all run."""
    argv = launcher_argv(
        cluster, 4, hosts_arg(cluster), sys.executable, str(SIGNAL_WORKER), str(tmp_path), "signals", *args,
        extra=("--grace-period", "2"),
    )  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=build.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"child{r}").exists() for r in range(4)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_launcher_reaches_every_remote_rank(
    fresh_cluster: Cluster, v3_build: Build, tmp_path: Path, signum: signal.Signals
) -> None:
    """Ranks on two hosts over ssh get the launcher's signal (their last words reach its stdout); one
    rank ignores SIGTERM and is killed after the grace period; nothing is left on any host."""
    cluster = fresh_cluster
    ignore = ("ignore",) if signum == signal.SIGTERM else ()
    proc = start_signal_ranks(cluster, v3_build, tmp_path, *ignore)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err.decode()
    got = {r: (tmp_path / f"signal{r}").read_text() for r in range(4) if (tmp_path / f"signal{r}").exists()}
    expected = {r: signum.name for r in range(4) if not (ignore and r == 1)}
    assert got == expected
    for r in expected:
        assert f"rank {r} got {signum.name}".encode() in out, out
    line = f"got {signum.name}: passed it to rank(s) 0,1,2,3"
    assert line in err.decode(), err.decode()
    if ignore:
        assert "rank(s) 1 did not end within 2s: SIGKILL" in err.decode(), err.decode()
    assert cluster.wait_clean(10) == {}, "processes left behind on the hosts"


def test_a_launcher_held_up_past_the_grace_still_reports_the_kill(
    fresh_cluster: Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """On a busy machine the remote supervisor's SIGKILL, due at the launcher's own deadline, can end a
    rank that ignores SIGTERM before the launcher looks again: made certain here by stopping the
    launcher through the grace. It still says which rank did not end in time."""
    cluster = fresh_cluster
    proc = start_signal_ranks(cluster, v3_build, tmp_path, "ignore")
    try:
        deadline = time.monotonic() + 60
        proc.send_signal(signal.SIGTERM)
        while not all((tmp_path / f"signal{r}").exists() for r in (0, 2, 3)):  # passed on: the grace runs
            assert time.monotonic() < deadline, "the ranks never got SIGTERM"
            time.sleep(0.05)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(4)  # past the grace: rank 1's supervisor has killed it
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert "got SIGTERM: passed it to rank(s) 0,1,2,3; rank(s) 1 did not end within 2s: SIGKILL" in err.decode()
    assert cluster.wait_clean(10) == {}, "processes left behind on the hosts"


def test_a_failed_remote_rank_ends_the_job_within_two_seconds(
    cluster: Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """Rank 1 (host 1) exits 3 while the others sleep: the launcher names it with its host at once."""
    argv = launcher_argv(
        cluster, 4, hosts_arg(cluster), sys.executable, str(SIGNAL_WORKER), str(tmp_path), "fail",
    )  # fmt: skip
    proc = run_job(cluster, v3_build, argv, timeout=60)
    ended = time.time()
    assert ended - float((tmp_path / "failed_at").read_text()) < 2.0 + 0.5  # + ssh's own exit over the network
    assert proc.returncode == 3, proc.stderr
    host = cluster.hosts[1].address
    assert f"rank 1 on host {host} exited with code 3; stopping the job" in proc.stderr, proc.stderr
    assert cluster.wait_clean(10) == {}


def test_a_host_ssh_cannot_reach_is_one_line_before_any_rank_starts(
    cluster: Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """Each host's shared connection authenticates before a rank starts (ssh_connections): a host
    nothing answers on ends the launch with ssh's own reason, exit 4, nothing started anywhere."""
    host = cluster.hosts[1].address
    argv = launcher_argv(
        cluster, 2, f"{host}:2", sys.executable, str(WORKER), str(tmp_path), "reduce", extra=("--ssh-port", "2")
    )
    proc = run_job(cluster, v3_build, argv, timeout=60)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"hvd-selector: error: cannot start the ranks: cannot reach host {host} over ssh: "
        f"ssh: connect to host {host} port 2: Connection refused"
    ], proc.stderr
    assert not list(tmp_path.iterdir())
    assert cluster.wait_clean(10) == {}


def test_a_missing_program_on_a_remote_host_is_one_line(cluster: Cluster, v3_build: Build, tmp_path: Path) -> None:
    proc = run_job(cluster, v3_build, launcher_argv(cluster, 2, hosts_arg(cluster, 1), "no-such-program"), timeout=60)
    assert proc.returncode == 127, proc.stderr
    assert "hvd-selector run: cannot start 'no-such-program' on" in proc.stderr and "command not found" in proc.stderr
    assert "Errno" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
