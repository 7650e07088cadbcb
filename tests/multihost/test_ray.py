"""hvd_selector.ray.RayExecutor on a real Ray cluster over three network-namespace hosts.

The test starts the cluster itself: ``ray start --head`` in host 0, ``ray start
--address`` in hosts 1 and 2, each node's raylet, object store and workers in
its own namespace. The driver (workers/ray_job.py) runs in host 0. Teardown,
even on failure: every process in each namespace gets SIGTERM, then SIGKILL
(by pid; ``ray stop`` would stop every Ray process on the machine, by name,
since the namespaces share one pid space), then the namespaces are deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.native_builds import Build
from tests.installed import require

from . import netns
from .conftest import _needs_root_and_tools

require("ray")
pytestmark = pytest.mark.slow
DRIVER = Path(__file__).resolve().parent / "workers" / "ray_job.py"
KILL_BOUND_S = 6 + 5 + 10  # timeout_s + the executor's report time + Ray noticing the death, on 2 shared cores


def _ray(cluster: netns.Cluster, host: netns.Host, env: dict[str, str], *args: str) -> None:
    """``ray start`` in one host; tried twice: Ray gives a node 30s to register, a load spike can take longer."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    # the node's workers inherit its environment: each namespace host is a machine of its own to the core
    # (on one real machine it would rightly use shared memory between them)
    env = env | {"HVD_SELECTOR_HOST_ID": host.name}
    for _attempt in (1, 2):
        proc = subprocess.run(
            host.exec_argv(ray_bin, "start", *args), env=env, capture_output=True, text=True, timeout=180
        )
        if proc.returncode == 0:
            return
        _stop(cluster, [host])  # what the failed start left in this host, before the second try
    raise RuntimeError(f"ray start on {host.name} failed twice: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")


def _stop(cluster: netns.Cluster, hosts: list[netns.Host]) -> None:
    """SIGTERM every process in the hosts but sshd, then a bounded wait (Cluster.close() SIGKILLs the rest)."""
    names = {h.name for h in hosts}
    for name, pids in cluster.leftover().items():
        for pid in pids if name in names else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and names & set(cluster.leftover()):
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory, v3_build: Build) -> Iterator[tuple[netns.Cluster, dict]]:
    """Three namespace hosts, a Ray node in each; everything stopped and deleted afterwards."""
    _needs_root_and_tools()
    cluster = netns.create(3, tmp_path_factory.mktemp("ray-cluster"), prefix="ry")
    temp = Path(tempfile.mkdtemp(prefix="ry"))  # short: Ray's socket paths live under it
    try:
        token = temp / "auth_token"  # the cluster's own token (Ray's token authentication), 0600
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
        env = v3_build.env(
            RAY_USAGE_STATS_ENABLED="0",
            RAY_enable_worker_prestart="0",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(token),
            HVD_SELECTOR_TIMEOUT="6",
        )
        common = ["--num-cpus=2", "--object-store-memory=100000000", f"--temp-dir={temp}", "--disable-usage-stats"]
        head = cluster.hosts[0].address
        started = time.monotonic()
        _ray(cluster, cluster.hosts[0], env, "--head", f"--node-ip-address={head}", "--port=6379", *common)
        for host in cluster.hosts[1:]:
            _ray(cluster, host, env, f"--address={head}:6379", f"--node-ip-address={host.address}", *common)
        print(f"ray cluster of 3 nodes started in {time.monotonic() - started:.1f}s")
        yield cluster, env
    finally:
        _stop(cluster, cluster.hosts)
        cluster.close()
        shutil.rmtree(temp, ignore_errors=True)


def _drive(cluster: netns.Cluster, env: dict, out: Path, mode: str) -> dict:
    argv = cluster.hosts[0].exec_argv(sys.executable, str(DRIVER), cluster.hosts[0].address, str(out), mode)
    proc = subprocess.run(
        argv, cwd=out, env=env, capture_output=True, text=True, timeout=240
    )  # cwd: on the workers sys.path
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict = json.loads((out / "result.json").read_text())
    print(f"{mode}: start {result['start_s']:.1f}s, all {result['run_s']:.1f}s")
    return result


def test_ray_executor_reduces_exactly_across_three_hosts_over_tcp(ray_cluster, tmp_path: Path) -> None:
    cluster, env = ray_cluster
    result = _drive(cluster, env, tmp_path, "reduce")
    ranks = result["ranks"]
    addresses = sorted(h.address for h in cluster.hosts)
    assert [(r["rank"], r["size"], r["local_rank"], r["local_size"]) for r in ranks] == [
        (i, 6, i % 2, 2) for i in range(6)
    ]
    nodes = [r["node"] for r in ranks]
    assert nodes[0::2] == nodes[1::2] and sorted(nodes[0::2]) == addresses  # placement: two workers per host
    assert result["worker_hosts"] == nodes
    for r in ranks:
        assert r["sum"] == result["expected_sum"]
        assert r["gathered"] == [g for rank in range(6) for g in (rank, rank)]
        assert r["broadcast"] == [0, 7, 14, 21, 28]
        summary, _, pairs = r["transport"].partition("; ")
        assert summary == "hierarchical: shm within 3 hosts, gloo tcp between host leaders", r["transport"]
        kinds = dict(p.split(" ", 1) for p in pairs.split(", "))
        for a in range(6):
            for b in range(a + 1, 6):  # shared memory within a host, the TCP mesh between hosts
                assert kinds[f"{a}-{b}"] == ("shm" if a // 2 == b // 2 else "gloo tcp"), r["transport"]
        others = set(addresses) - {r["node"]}
        assert others <= set(r["peers"]), (r["node"], r["peers"])  # mesh connections to the other two hosts
    for host in cluster.hosts:  # the only way between the hosts: each one's veth
        link = netns.sh("ip", "-n", host.name, "-d", "-o", "link", "show", host.veth).stdout
        assert " veth " in link, link


def test_a_dead_actor_ends_the_job_cleanly(ray_cluster, tmp_path: Path) -> None:
    cluster, env = ray_cluster
    result = _drive(cluster, env, tmp_path, "kill")
    killed = json.loads((tmp_path / "killed.json").read_text())
    assert result["raised"] == "PeerFailureError", result
    assert result["message"].startswith("rank 1 (Ray actor on "), result["message"]
    assert "died" in result["message"] and "start() again" in result["message"]
    assert "; ranks [0, 2] ended with PeerFailureError;" in result["message"], result["message"]
    assert not result["after_failure_started"]  # the executor stopped its workers
    for rank in (0, 2):
        survivor = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert survivor["error"] == "PeerFailureError", survivor
        assert survivor["time"] - killed["time"] < 6 + 2, survivor
    took = result["raised_at"] - killed["time"]
    print(f"run() raised {took:.1f}s after the kill")
    assert took < KILL_BOUND_S, took


ARGUMENTS = """
import json
import hvd_selector_horovod
hvd_selector_horovod.install()
from horovod.ray import RayExecutor
import hvd_selector.ray
errors = []
for make in (
    lambda: RayExecutor.create_settings(ssh_str="ssh -p 2222"),
    lambda: RayExecutor.create_settings(nics={"eth0", "eth1"}),
    lambda: RayExecutor(RayExecutor.create_settings(), num_workers=2, num_hosts=2),
    lambda: RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=1),
    lambda: RayExecutor(RayExecutor.create_settings(), num_workers=2).run(print),
):
    try:
        make()
        errors.append(None)
    except (ValueError, RuntimeError) as exc:
        errors.append(str(exc))
print(json.dumps({"alias": RayExecutor is hvd_selector.ray.RayExecutor, "errors": errors}))
"""


def test_horovod_ray_is_the_alias_and_bad_arguments_are_one_clear_error(v3_build: Build, tmp_path: Path) -> None:
    """``from horovod.ray import RayExecutor`` ([horovod] extra); what cannot be honoured says so, no Ray call."""
    env = v3_build.env()
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[2] / "compat" / "horovod")
    argv = [sys.executable, "-c", ARGUMENTS]  # cwd: not the repository (its hvd_selector is no installed build)
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["alias"] is True
    assert out["errors"] == [
        "RayExecutor.create_settings: ssh_identity_file/ssh_str do not apply (Ray starts the ranks)",
        "RayExecutor.create_settings: nics=['eth0', 'eth1']: hvd-selector's mesh uses one interface",
        "RayExecutor: give either num_workers, or num_hosts with num_workers_per_host",
        "RayExecutor: min_workers not supported by hvd-selector: elastic Ray jobs are not built yet; "
        "drop them for a fixed-size job",
        "RayExecutor.run: not started; call start() first",
    ]
