"""hvd_selector.torch on 2 ranks (gloo and MPICH builds): every function
against exact answers (workers/torch_api.py), and the example training
script whose ranks must end with identical parameters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from devtools.native_builds import REPO, Build, run_argv
from tests.installed import require

from .native_helpers import assert_checks_passed, launch

require("torch")
pytestmark = pytest.mark.slow

LOSS = re.compile(r"epoch \d: mean loss (\d+\.\d+) over 2 ranks")
CHECKS = 25  # the @check blocks in workers/torch_api.py


@pytest.mark.parametrize("which", ["gloo", "mpich"])
def test_every_function(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    build: Build = request.getfixturevalue(f"{which}_build")
    proc = launch(build, 2, "torch_api.py", str(tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(2):
        assert_checks_passed(tmp_path, rank, CHECKS)
        if which == "gloo":  # the timeout and shutdown checks after a re-init (MPI initialises once)
            assert json.loads((tmp_path / f"tail{rank}.json").read_text()) == {}


def test_example_ranks_end_identical(gloo_build: Build, tmp_path: Path) -> None:
    import subprocess

    script = REPO / "examples" / "pytorch_mnist.py"
    cmd = run_argv(2, script, "--epochs", "2", "--out", str(tmp_path))
    proc = subprocess.run(cmd, cwd=tmp_path, env=gloo_build.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import torch

    params = [torch.load(tmp_path / f"params.rank{r}.pt", weights_only=True) for r in range(2)]
    assert params[0].keys() == params[1].keys() and params[0]
    for name in params[0]:
        assert torch.equal(params[0][name], params[1][name]), name
    first = torch.load(tmp_path / "initial.rank1.pt", weights_only=True)
    assert any(not torch.equal(first[n], params[1][n]) for n in first), "training changed nothing"
    printed = [float(x) for x in LOSS.findall(proc.stdout)]
    assert len(printed) == 2 and printed[1] < printed[0] / 4, f"the example does not learn: {printed}"
    shown = [float(x) for x in LOSS.findall((REPO / "docs" / "guide" / "pytorch.md").read_text())]
    assert shown == pytest.approx(printed, abs=0.01), f"docs/guide/pytorch.md shows {shown}, it prints {printed}"


@pytest.mark.parametrize("drift", [1.0, 3.5])
def test_ranks_that_drift_apart(drift: float, gloo_build: Build, tmp_path: Path) -> None:
    """issue 39: no Horovod stall check (docs/guide/pytorch.md, "Ranks that drift apart"). With
    HVD_SELECTOR_TIMEOUT=2, a rank that computes alone for 1 s costs nothing; one that computes for
    3.5 s ends rank 0's waiting allreduce with CollectiveTimeoutError, later torch collectives fail
    until shutdown() and init(), and after that the job goes on."""
    proc = launch(gloo_build, 2, "torch_drift.py", str(tmp_path), str(drift), cwd=tmp_path, HVD_SELECTOR_TIMEOUT="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    if drift < 2:
        assert seen == [{"drifted": "ok", "next": "ok", "after_reinit": "ok"}] * 2, seen
        return
    assert seen[0]["drifted"].startswith("CollectiveTimeoutError"), seen
    assert seen[1]["drifted"].startswith(("PeerFailureError", "CollectiveTimeoutError")), seen  # rank 0 gave up
    assert all("call shutdown() and init() again" in s["next"] for s in seen), seen
    assert [s["after_reinit"] for s in seen] == ["ok", "ok"], seen
