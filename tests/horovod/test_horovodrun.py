"""``horovodrun`` and ``horovod.run`` from hvd-selector-horovod, in a fresh venv with the opt-in installed.

The venv and wheels are test_compat's (the compat wheel built with pip,
installed with pip); the training script is a Horovod PyTorch script as
Horovod's users write it (``import horovod.torch as hvd``), unchanged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from devtools import native_builds
from devtools.venvs import user_env
from tests.horovod.test_compat import _venv, wheels  # noqa: F401  (wheels: the module's fixture)
from tests.installed import require

require("torch")
pytestmark = pytest.mark.slow

TRAIN = """
import json, os, sys
import torch
import horovod.torch as hvd

hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different starting weights: broadcast_parameters must fix that
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(hvd.rank())
for step in range(20):
    x = torch.randn(16, 4, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
out = {"rank": hvd.rank(), "size": hvd.size(), "weights": [p.tolist() for p in model.parameters()],
       "fusion": os.environ.get("HOROVOD_FUSION_THRESHOLD"), "cycle": os.environ.get("HOROVOD_CYCLE_TIME")}
with open(os.path.join(sys.argv[1], f"rank{hvd.rank()}.json"), "w") as f:
    json.dump(out, f)
"""

RUN_FUNC = """
import json, horovod

def work(base):
    import os, stat, sys
    import torch
    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + base)]), op=hvd.Sum).item()
    mode = stat.S_IMODE(os.stat(sys.argv[-1]).st_mode)  # the private directory func came in
    return {"rank": hvd.rank(), "size": hvd.size(), "total": total, "mode": oct(mode)}

print(json.dumps(horovod.run(work, args=(3,), np=2)))
try:
    horovod.run(work, args=(3,), np=2, hosts="other-host:2")
except ValueError as exc:
    print(exc)
"""


def _env() -> dict[str, str]:
    build = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO)
    return user_env(PYTHONPATH=build.env()["PYTHONPATH"], HVD_SELECTOR_TIMEOUT="20")


@pytest.fixture(scope="module")
def venv_bin(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    return _venv(tmp_path_factory.mktemp("horovodrun") / "venv", wheels["compat"]).parent


def _horovodrun(venv_bin: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = _env()
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"  # `python` in the command is the venv's, as after activate
    return subprocess.run(
        [str(venv_bin / "horovodrun"), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_horovodrun_runs_an_unchanged_horovod_script(venv_bin: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    argv = ["-np", "2", "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.5", "--start-timeout", "30"]
    proc = _horovodrun(venv_bin, *argv, "python", "train.py", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["size"] for r in ranks} == {2}
    assert ranks[0]["weights"] == ranks[1]["weights"]  # broadcast + averaged gradients: one model
    assert {r["fusion"] for r in ranks} == {str(2 << 20)} and {r["cycle"] for r in ranks} == {"0.5"}


def test_check_build_tells_the_truth_in_horovods_format(venv_bin: Path, tmp_path: Path) -> None:
    proc = _horovodrun(venv_bin, "--check-build", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Horovod v0.28.1 ")
    for header in ("Available Frameworks:", "Available Controllers:", "Available Tensor Operations:"):
        assert header in lines
    assert "    [X] PyTorch" in lines and "    [ ] TensorFlow" in lines
    controllers = lines[lines.index("Available Controllers:") + 1 : lines.index("Available Controllers:") + 3]
    assert controllers == ["    [ ] MPI", "    [X] Gloo"]  # the gloo build: no MPI controller
    assert "no Gloo library is linked." in lines


UNSUPPORTED_ARGV = {
    "--config-file": ["--config-file", "c.yaml"],
    "--cache-capacity": ["--cache-capacity", "1024"],
    "--hierarchical-allreduce": ["--hierarchical-allreduce"],
    "--hierarchical-allgather": ["--hierarchical-allgather"],
    "--autotune": ["--autotune"],
    "--autotune-log-file": ["--autotune-log-file", "a.csv"],
    "--autotune-warmup-samples": ["--autotune-warmup-samples", "3"],
    "--autotune-steps-per-sample": ["--autotune-steps-per-sample", "10"],
    "--autotune-bayes-opt-max-samples": ["--autotune-bayes-opt-max-samples", "20"],
    "--autotune-gaussian-process-noise": ["--autotune-gaussian-process-noise", "0.8"],
    "--elastic-timeout": ["--elastic-timeout", "600"],
    "--reset-limit": ["--reset-limit", "3"],
    "--blacklist-cooldown-range": ["--blacklist-cooldown-range", "60", "300"],
    "--timeline-filename": ["--timeline-filename", "t.json"],
    "--timeline-mark-cycles": ["--timeline-mark-cycles"],
    "--stall-check-warning-time-seconds": ["--stall-check-warning-time-seconds", "60"],
    "--stall-check-shutdown-time-seconds": ["--stall-check-shutdown-time-seconds", "120"],
    "--mpi-threads-disable": ["--mpi-threads-disable"],
    "--mpi-args": ["--mpi-args=--map-by ppr:1:node"],
    "--binding-args": ["--binding-args=--rankfile f"],
    "--num-nccl-streams": ["--num-nccl-streams", "2"],
    "--thread-affinity": ["--thread-affinity", "1"],
    "--gloo-timeout-seconds": ["--gloo-timeout-seconds", "30"],
    "--log-level": ["--log-level", "DEBUG"],
    "--log-with-timestamp": ["--log-with-timestamp"],
    "--prefix-output-with-timestamp": ["-prefix-timestamp"],
    "--jsrun": ["--jsrun"],
}


def test_every_flag_it_cannot_honour_is_one_line_and_exit_2(venv_bin: Path, tmp_path: Path) -> None:
    listing = (
        "import json; from hvd_selector_horovod.runner import UNSUPPORTED as U; print(json.dumps(list(U.values())))"
    )
    listed = subprocess.run([str(venv_bin / "python"), "-c", listing], capture_output=True, text=True, check=True)
    assert sorted(flag for flag, _ in json.loads(listed.stdout)) == sorted(UNSUPPORTED_ARGV)  # none left untested
    marker = tmp_path / "ran"
    for flag, argv in UNSUPPORTED_ARGV.items():
        proc = _horovodrun(venv_bin, "-np", "2", *argv, "touch", str(marker), cwd=tmp_path)
        assert proc.returncode == 2, (flag, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"horovodrun: error: {flag} "), proc.stderr
        assert not marker.exists(), flag  # nothing started


def test_flags_that_say_what_hvd_selector_does_anyway_are_accepted(venv_bin: Path, tmp_path: Path) -> None:
    argv = ["--no-hierarchical-allreduce", "--no-autotune", "--no-stall-check", "--tcp", "--disable-cache", "--gloo"]
    proc = _horovodrun(venv_bin, "-np", "2", *argv, "--verbose", "true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "selector_backend run -np 2 true" in proc.stderr  # --verbose shows the command it runs


def test_elastic_flags_map_onto_hvd_selector_run(venv_bin: Path, tmp_path: Path) -> None:
    """--min-np/--max-np/--slots-per-host/--host-discovery-script reach hvd-selector run (-np defaults to --min-np);
    a discovery script that cannot run is one line, exit 2."""
    argv = ["--min-np", "1", "--max-np", "3", "--slots-per-host", "2", "--host-discovery-script", "./missing.sh"]
    proc = _horovodrun(venv_bin, *argv, "--verbose", "true", cwd=tmp_path)
    assert "selector_backend run -np 1 --host-discovery-script ./missing.sh --min-np 1 --max-np 3 --slots 2 true" in (
        proc.stderr
    ), proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert "cannot run the host discovery script ./missing.sh" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--mpi", "true"], "--mpi: this build"),
        (["--network-interface", "eth0,eth1", "true"], "--network-interface eth0,eth1: hvd-selector run uses one"),
        ([], "no command to run"),
        (["--no-such-flag", "true"], "unrecognized arguments"),
    ],
)
def test_bad_use_is_one_line_and_exit_2(venv_bin: Path, tmp_path: Path, argv: list[str], says: str) -> None:
    proc = _horovodrun(venv_bin, "-np", "2", *argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_horovod_run_returns_each_ranks_result(venv_bin: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(venv_bin / "python"), "-c", RUN_FUNC],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results, refused = proc.stdout.splitlines()[-2:]
    total = (0 + 3) + (1 + 3)
    assert json.loads(results) == [{"rank": r, "size": 2, "total": total, "mode": "0o700"} for r in range(2)]
    assert "other-host are remote" in refused
