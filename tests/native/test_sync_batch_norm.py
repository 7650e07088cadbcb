"""hvd.SyncBatchNorm on 2 CPU ranks with different batch sizes: outputs,
input gradients, summed weight/bias gradients and running statistics equal
one torch BatchNorm over the concatenated batch (workers/sync_batch_norm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.native_builds import Build
from tests.installed import require

from .native_helpers import assert_checks_passed, launch

require("torch")
pytestmark = pytest.mark.slow

CASES = 5  # the CASES of workers/sync_batch_norm.py


def test_sync_batch_norm_equals_batch_norm_over_the_global_batch(gloo_build: Build, tmp_path: Path) -> None:
    proc = launch(gloo_build, 2, "sync_batch_norm.py", str(tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(2):
        assert_checks_passed(tmp_path, rank, CASES)
