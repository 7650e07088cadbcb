"""A running hvd_selector.torch job with strangers connecting to its ports.

The stranger (devtools/stray_connections.py) runs in this test process,
never sees the job secret and knocks on every port the launcher and the
ranks listen on - the rendezvous store all along, a data listener when it
catches one open during an init() - with garbage, idle sockets,
replays and bare connects. The job (workers/torch_strays.py) must get every
result right through its init/shutdown cycles (issue 25: stray connections
must never desync a job)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devtools.native_builds import Build, run_argv
from devtools.stray_connections import StrayConnections
from tests.installed import require

from .native_helpers import WORKERS

require("torch")
pytestmark = pytest.mark.slow

CYCLES = 6


def test_stray_connections_do_not_disturb_a_running_job(gloo_build: Build, tmp_path: Path) -> None:
    argv = run_argv(2, WORKERS / "torch_strays.py", str(tmp_path), str(CYCLES))
    job = subprocess.Popen(
        argv, cwd=tmp_path, env=gloo_build.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with StrayConnections(job.pid) as strays:
        out, err = job.communicate(timeout=300)
    assert job.returncode == 0, out[-3000:] + err[-3000:]
    for rank in range(2):
        assert (tmp_path / f"outcome{rank}.txt").read_text() == f"ok {CYCLES}"
    # The store was reached all along. A rank's data listener lives only while its init() connects
    # the mesh (milliseconds for 2 ranks on one host), so this stranger seldom finds one; strays at
    # that moment are test_dataplane.py's test_stray_connections_during_init_and_collectives.
    assert strays.ports and strays.connected >= 20, (strays.ports, strays.connected)
