"""Horovod's own test/parallel/test_torch.py against hvd_selector.torch (upstream_torch.py).

The suite is Horovod's and is not in this repository: set
HVD_SELECTOR_HOROVOD_TEST_TORCH to test/parallel/test_torch.py inside a Horovod
checkout to run it at 1 and 2 ranks (about a minute on 2 idle cores); skipped
otherwise.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import native_builds

from . import upstream_torch

REPO = Path(__file__).resolve().parents[2]

ENV = "HVD_SELECTOR_HOROVOD_TEST_TORCH"
# torch >= 2.9's Muon rejects 1-D parameters; these tests build every torch.optim
# optimizer for a model with biases, so they fail in torch itself, under Horovod too.
MUON = {"test_broadcast_state", "test_broadcast_state_options", "test_force_allreduce"}


def test_bad_paths_exit_2(tmp_path: Path) -> None:
    script = [sys.executable, "-m", "tests.horovod.upstream_torch"]
    missing = subprocess.run([*script, str(tmp_path / "nope.py")], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stdout.startswith("error: ") and "Traceback" not in missing.stderr
    lone = tmp_path / "test_torch.py"
    lone.write_text("")
    alone = subprocess.run([*script, str(lone)], cwd=REPO, capture_output=True, text=True)
    assert alone.returncode == 2 and "utils/common.py is missing" in alone.stdout


def test_installed_build_asked_for_but_absent_exits_2(tmp_path: Path) -> None:
    try:
        importlib.metadata.distribution("hvd-selector")
        pytest.skip("this Python has hvd-selector installed")
    except importlib.metadata.PackageNotFoundError:
        pass
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "common.py").write_text("")
    (tmp_path / "parallel").mkdir()
    suite = tmp_path / "parallel" / "test_torch.py"
    suite.write_text("")
    script = REPO / "tests" / "horovod" / "upstream_torch.py"  # run as a file, as ../shared/gpu-check does
    proc = subprocess.run(
        [sys.executable, str(script), str(suite), "--build", "installed", "--", "-k", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "no hvd-selector installed" in proc.stdout, proc.stdout + proc.stderr


# At 1 rank the join test asserts join() returns a rank other than the first to join: one rank
# cannot (join() returns the rank that joined last, 0, under Horovod too).
ONE_RANK = {"test_horovod_join_allreduce": "may not be equal to first_join_rank"}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(ENV), reason=f"{ENV} does not name Horovod's test_torch.py")
@pytest.mark.parametrize(("ranks", "least"), [(1, 68), (2, 102)])
def test_horovod_suite(ranks: int, least: int) -> None:
    pytest.importorskip("torch")
    build = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO)
    results, proc = upstream_torch.run(Path(os.environ[ENV]), np_=ranks, env=build.env())
    assert len(results) == ranks, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(upstream_torch.summary(results))
    known = {name: "Muon" for name in MUON} | (ONE_RANK if ranks == 1 else {})
    for res in results:
        unexpected = {k: v for k, v in res.failed.items() if not (k in known and known[k] in v)}
        assert not unexpected, unexpected
        assert len(res.passed) >= least, len(res.passed)
