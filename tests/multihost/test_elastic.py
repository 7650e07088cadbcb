"""Elastic jobs across network-namespace hosts: a host dies, a host joins; training goes on.

The launcher runs in host 0 with a host discovery script that prints a file
the test rewrites; workers (workers/elastic_train.py) start over ssh. Each
worker logs every step: its size, its rank, the loss and the commit counter.
The loss at step k does not depend on the job's size, so a curve that
continues from the last commit is a curve whose every logged loss is the
expected one; each step's allreduce is checked exactly inside the worker
(a stale tensor or a mixed mesh exits 5, which fails the job).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.native_builds import Build

from . import netns
from .conftest import _needs_root_and_tools

pytestmark = pytest.mark.slow
WORKER = Path(__file__).resolve().parent / "workers" / "elastic_train.py"
STEPS = 80
COMMIT_EVERY = 5  # as in the worker
PAUSE = "0.1"  # seconds between steps: the test acts while training runs


@pytest.fixture()
def el_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.Cluster]:
    """Three hosts named el...: torn down even on failure."""
    _needs_root_and_tools()
    cluster = netns.create(3, tmp_path_factory.mktemp("elastic-cluster"), prefix="el")
    try:
        yield cluster
    finally:
        cluster.close()


def _start(
    cluster: netns.Cluster, build: Build, tmp_path: Path, hosts: str, np_: int, api: str = "numpy"
) -> subprocess.Popen[str]:
    (tmp_path / "hosts.txt").write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'hosts.txt'}\n")
    script.chmod(0o755)
    argv = cluster.hosts[0].exec_argv(
        sys.executable, "-m", "selector_backend", "run", "-np", str(np_), "--min-np", "2", "--max-np", "3",
        "--host-discovery-script", str(script), "--ssh-config-file", str(cluster.ssh_config),
        sys.executable, str(WORKER), str(tmp_path), str(STEPS), PAUSE, api,
    )  # fmt: skip
    env = build.env(HVD_SELECTOR_TIMEOUT="15")
    return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _logs(tmp_path: Path) -> dict[str, list[dict[str, object]]]:
    logs = {}
    for path in sorted(tmp_path.glob("log-*.jsonl")):
        lines = path.read_text().splitlines()
        logs[path.stem.removeprefix("log-")] = [json.loads(line) for line in lines if line.endswith("}")]
    return logs


def _wait_for_step(proc: subprocess.Popen[str], tmp_path: Path, step: int) -> None:
    deadline = time.monotonic() + 150  # torch ranks import torch first: slow on a loaded machine
    while not any(r.get("step", 0) >= step for log in _logs(tmp_path).values() for r in log):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"training never reached step {step}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def _steps(log: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for r in log if "step" in r]


def _check_curve(log: list[dict[str, object]]) -> None:
    """Every logged loss is the one its step must have (0.81**k): the curve continues across generations."""
    for record in _steps(log):
        assert record["loss"] == pytest.approx(0.81 ** int(str(record["step"])), rel=1e-9), record
    assert not [r for r in log if "stale" in r], log


@pytest.mark.parametrize("api", ["numpy", "torch"])
def test_el_killed_host_training_goes_on_smaller_from_last_commit(
    el_cluster: netns.Cluster, v3_build: Build, tmp_path: Path, api: str
) -> None:
    """3 ranks on hosts 1 (2 slots) and 2 (1 slot); host 2 dies mid-training: 2 ranks finish from the last commit.

    "torch": TorchState (model and optimizer) under hvd_selector.torch's engine."""
    if api == "torch":
        pytest.importorskip("torch")
    cluster = el_cluster
    h1, h2 = (h.address for h in cluster.hosts[1:])
    proc = _start(cluster, v3_build, tmp_path, f"{h1}:2\n{h2}:1\n", 3, api)
    _wait_for_step(proc, tmp_path, 17)
    cluster.kill_host(cluster.hosts[2])
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert f"on host {h2} " in err and "blacklisting it" in err, err[-3000:]
    assert "generation 2: 2 rank(s) on " + h1 in err, err[-3000:]
    assert "generation 3" not in err, err[-3000:]  # the script still lists host 2: blacklisted, it gets no worker
    logs = _logs(tmp_path)
    assert len(logs) == 3, logs.keys()
    survivors = {w: log for w, log in logs.items() if log[-1].get("done") == STEPS}
    assert len(survivors) == 2, {w: log[-1] for w, log in logs.items()}
    for log in survivors.values():
        _check_curve(log)
        steps = _steps(log)
        sizes = [r["size"] for r in steps]
        cut = sizes.index(2)
        assert set(sizes[:cut]) == {3} and set(sizes[cut:]) == {2}, sizes
        before, after = steps[cut - 1], steps[cut]
        resumed_from = int(str(after["step"])) - 1  # the step the restored state held
        assert resumed_from % COMMIT_EVERY == 0 and resumed_from <= int(str(before["step"])), (before, after)
        assert after["commits"] == resumed_from // COMMIT_EVERY, after  # the commit counter came back with it
        assert [r["step"] for r in steps[cut:]] == list(range(resumed_from + 1, STEPS + 1))
        assert log[-1]["resets"] == [2], log[-1]
    assert sorted(log[-1]["rank"] for log in survivors.values()) == [0, 1]
    assert cluster.wait_clean(10) == {}


def test_el_added_host_joins_at_the_next_reset(el_cluster: netns.Cluster, v3_build: Build, tmp_path: Path) -> None:
    """2 ranks on host 1; the discovery script then lists host 2: it joins at the next commit, size 3."""
    cluster = el_cluster
    h1, h2 = (h.address for h in cluster.hosts[1:])
    proc = _start(cluster, v3_build, tmp_path, f"{h1}:2\n", 2)
    _wait_for_step(proc, tmp_path, 12)
    (tmp_path / "hosts.txt").write_text(f"{h1}:2\n{h2}:1\n")
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "generation 2: 3 rank(s) on " in err, err[-3000:]
    logs = _logs(tmp_path)
    assert len(logs) == 3, logs.keys()
    for worker, log in logs.items():
        assert log[-1].get("done") == STEPS and log[-1]["size"] == 3, (worker, log[-1])
        _check_curve(log)
    old = [log for log in logs.values() if _steps(log)[0]["size"] == 2]
    (new,) = [log for log in logs.values() if _steps(log)[0]["size"] == 3]
    assert len(old) == 2
    joined_at = int(str(_steps(new)[0]["step"]))
    assert (joined_at - 1) % COMMIT_EVERY == 0 and joined_at > 12, joined_at  # right after a commit
    assert [r["step"] for r in _steps(new)] == list(range(joined_at, STEPS + 1))
    assert _steps(new)[0]["commits"] == (joined_at - 1) // COMMIT_EVERY  # it took rank 0's state
    for log in old:
        steps = _steps(log)
        assert [r["step"] for r in steps] == list(range(1, STEPS + 1))  # no step lost or repeated
        assert [r["size"] for r in steps] == [2] * (joined_at - 1) + [3] * (STEPS - joined_at + 1)
        assert log[-1]["resets"] == [3], log[-1]
    assert _steps(new)[0]["rank"] == 2 and new[-1]["resets"] == []  # the survivors keep ranks 0 and 1
    assert cluster.wait_clean(10) == {}


def test_el_sigterm_to_the_launcher_ends_every_worker_without_a_restart(
    el_cluster: netns.Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """SIGTERM to the elastic launcher: every worker gets it, none re-forms, exit 143, nothing left behind."""
    cluster = el_cluster
    h1, h2 = (h.address for h in cluster.hosts[1:])
    proc = _start(cluster, v3_build, tmp_path, f"{h1}:2\n{h2}:1\n", 3)
    _wait_for_step(proc, tmp_path, 7)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert "got SIGTERM: passed it to every worker" in err and "generation 2" not in err, err[-3000:]
    assert not any(log[-1].get("done") for log in _logs(tmp_path).values())
    assert cluster.wait_clean(10) == {}


def _run_recording_workers(cluster: netns.Cluster, build: Build, tmp_path: Path, hosts: str, *np_args: str):
    """An elastic job whose workers only record that they ran (ran.<worker>) and exit 0 after 2 s (the
    first to exit 0 ends the job), on the hosts a discovery script prints from ``hosts``."""
    (tmp_path / "hosts.txt").write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'hosts.txt'}\n")
    script.chmod(0o755)
    worker = f"echo ran > {tmp_path}/ran.$HVD_SELECTOR_WORKER; sleep 2"
    argv = cluster.hosts[0].exec_argv(
        sys.executable, "-m", "selector_backend", "run", *np_args, "--host-discovery-script", str(script),
        "--ssh-config-file", str(cluster.ssh_config), "sh", "-c", worker,
    )  # fmt: skip
    return subprocess.run(argv, cwd=tmp_path, env=build.env(), capture_output=True, text=True, timeout=120)


def test_el_sixteen_workers_on_one_host_share_two_ssh_connections(
    el_cluster: netns.Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """16 workers on one host whose sshd keeps its default MaxStartups (10:30:100): the elastic launcher
    starts them as sessions over 2 shared connections (8 a connection), so none is refused and the host
    sees 2 logins, not 16."""
    cluster = el_cluster
    host = cluster.hosts[1]
    log = cluster.tmp / f"sshd-{host.name}.log"
    logins_before = log.read_text(errors="replace").count("Accepted publickey")
    proc = _run_recording_workers(cluster, v3_build, tmp_path, f"{host.address}:16\n", "-np", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list(tmp_path.glob("ran.*"))) == 16, proc.stderr[-3000:]
    assert log.read_text(errors="replace").count("Accepted publickey") - logins_before == 2, log.read_text()[-3000:]
    assert cluster.wait_clean(10) == {}


def test_el_a_host_ssh_cannot_reach_is_blacklisted_before_a_worker_starts_there(
    el_cluster: netns.Cluster, v3_build: Build, tmp_path: Path
) -> None:
    """The script lists a host whose sshd is gone, then a good one: the launcher says why ssh cannot
    reach the first (its connection fails before any worker starts there), blacklists it, and runs the
    job on the second."""
    cluster = el_cluster
    dead, good = cluster.hosts[2].address, cluster.hosts[1].address
    cluster.kill_host(cluster.hosts[2])
    hosts = f"{dead}:1\n{good}:1\n"
    proc = _run_recording_workers(cluster, v3_build, tmp_path, hosts, "-np", "1", "--min-np", "1", "--max-np", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    reason = f"ssh: connect to host {dead} port 22: Connection refused"
    assert f"hvd-selector run: cannot reach host {dead} over ssh: {reason}; blacklisting it" in proc.stderr
    assert "exited with code" not in proc.stderr, proc.stderr[-3000:]
    assert f"generation 1: 1 rank(s) on {good}" in proc.stderr, proc.stderr[-3000:]
    assert len(list(tmp_path.glob("ran.*"))) == 1
    assert cluster.wait_clean(10) == {}
