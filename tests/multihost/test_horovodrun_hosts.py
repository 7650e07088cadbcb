"""``horovodrun -H`` across network-namespace hosts, from a fresh venv with the [horovod] extra.

horovodrun has no --ssh-config-file (Horovod has none): as a user's
~/.ssh/config would, an ``ssh`` first on PATH adds the cluster's config
(``-F``) and runs the real ssh.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.native_builds import Build
from tests.horovod.test_compat import _venv, wheels  # noqa: F401  (wheels: the module's fixture)
from tests.horovod.test_horovodrun import TRAIN
from tests.installed import require

from .netns import Cluster

require("torch")
pytestmark = pytest.mark.slow


def test_horovodrun_with_hosts_trains_across_namespace_hosts(
    cluster: Cluster,
    v3_build: Build,
    wheels: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    venv_bin = _venv(tmp_path / "venv", wheels["compat"]).parent
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "ssh").write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {cluster.ssh_config} "$@"\n')
    (shim / "ssh").chmod(0o755)
    (tmp_path / "train.py").write_text(TRAIN)
    hosts = ",".join(f"{h.address}:1" for h in cluster.hosts[1:])
    env = v3_build.env(HVD_SELECTOR_TIMEOUT="30")
    env["PATH"] = f"{shim}:{env['PATH']}"
    argv = [str(venv_bin / "horovodrun"), "-np", "2", "-H", hosts, "--fusion-threshold-mb", "1"]
    argv += [str(venv_bin / "python"), str(tmp_path / "train.py"), str(tmp_path)]
    proc = subprocess.run(
        cluster.hosts[0].exec_argv(*argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert {r["fusion"] for r in ranks} == {str(1 << 20)}  # a HOROVOD_* setting reaches the remote ranks
    assert cluster.wait_clean(10) == {}
