"""A real single-node Slurm (slurm-wlm + munge) started with a throwaway config: ``srun -n 2``.

The ranks learn rank, size, local rank and the rendezvous host from Slurm's
environment alone (no hvd-selector launcher); the secret comes from a file.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.native_builds import REPO, Build

pytestmark = pytest.mark.slow
WORKER = Path(__file__).resolve().parent / "workers" / "job.py"

SLURM_CONF = """\
ClusterName=hvdtest
SlurmctldHost={host}
SlurmctldPort={port}
SlurmdPort={port2}
AuthType=auth/munge
AuthInfo=socket={tmp}/munge.socket
CredType=cred/munge
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/ctld.pid
SlurmdPidFile={tmp}/d.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SlurmUser=root
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("slurm")
    for tool in ("munged", "slurmctld", "slurmd", "srun", "sinfo"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (slurm-wlm, munge in .ci/apt-packages.txt)")
    if os.geteuid() != 0:
        pytest.skip("slurmd needs root")
    tmp = tmp_path / "slurm"
    for d in ("state", "spool", "log"):
        (tmp / d).mkdir(parents=True)
    (tmp / "munge.key").write_bytes(os.urandom(1024))
    (tmp / "munge.key").chmod(0o600)
    conf = tmp / "slurm.conf"
    host = socket.gethostname()
    conf.write_text(
        SLURM_CONF.format(host=host, port=_free_port(), port2=_free_port(), tmp=tmp, cpus=os.cpu_count() or 1)
    )
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        munge = ["munged", "-F", "--force", f"--key-file={tmp / 'munge.key'}", f"--socket={tmp / 'munge.socket'}"]
        munge += [f"--pid-file={tmp / 'munged.pid'}", f"--log-file={tmp / 'log/munged.log'}"]
        munge += [f"--seed-file={tmp / 'log/seed'}"]
        for argv in (
            munge,
            ["slurmctld", "-D", "-f", str(conf), "-L", str(tmp / "log/ctld.log")],
            ["slurmd", "-D", "-f", str(conf), "-L", str(tmp / "log/d.log")],
        ):
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        while True:  # bounded wait for the node to be idle
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10)
            if out.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "".join((tmp / "log" / f).read_text(errors="replace")[-800:] for f in ("ctld.log", "d.log"))
                pytest.fail(f"Slurm did not come up: sinfo {out.stdout!r} {out.stderr!r}\n{logs}")
            time.sleep(0.3)
        yield env
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_srun_two_ranks(slurm: dict[str, str], v3_build: Build, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    env = {**v3_build.env(HVD_SELECTOR_SECRET_FILE=str(key)), "SLURM_CONF": slurm["SLURM_CONF"]}
    argv = ["srun", "-n", "2", sys.executable, str(WORKER), str(tmp_path), "reduce"]
    proc = subprocess.run(argv, cwd=WORKER.parent, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(i["rank"], i["size"], i["local_rank"], i["local_size"]) for i in infos] == [(0, 2, 0, 2), (1, 2, 1, 2)]
    assert (tmp_path / "rank0.bin").read_bytes() == (tmp_path / "rank1.bin").read_bytes()


def test_srun_starting_an_mpi_build_without_pmi_fails_at_init(slurm: dict[str, str], tmp_path: Path) -> None:
    """``srun -n 2`` with no MPI plugin (MpiDefault=none): MPICH sees no job and makes each task a job of
    one rank; init() names Slurm's size and MPI's on both tasks instead of two trainings that exit 0."""
    from devtools.native_builds import build_variant, mpi_defines

    if not Path("/usr/bin/mpicc.mpich").exists():
        pytest.skip("mpicc.mpich not installed")
    build = build_variant("mpi-mpich-x86_64_v3", mpi_defines("mpich"))
    worker = REPO / "tests" / "native" / "workers" / "job_checks.py"
    env = {**build.env(), "SLURM_CONF": slurm["SLURM_CONF"]}
    argv = ["srun", "-n", "2", sys.executable, str(worker), str(tmp_path), "split"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    for r in range(2):
        assert (tmp_path / f"rank{r}.json").exists(), proc.stderr[-3000:]
        outcome = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert outcome.get("error") == "JobEnvError", outcome
        assert f"Slurm started this process as rank {r} of 2 (SLURM_NTASKS=2)" in outcome["message"], outcome
