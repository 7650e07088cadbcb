"""hvd_selector.elastic's state API in one process (a job of one rank): commit, restore, sync, on_reset and
run()'s recovery; the elastic launcher's bad input. The multi-host behaviour is tests/multihost/test_elastic.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.native_builds import Build, python
from selector_backend.jobs import elastic_protocol as protocol

OBJECT_STATE = """
import json
import hvd_selector as hvd
from hvd_selector import elastic

hvd.init()
state = elastic.ObjectState(epoch=0, losses=[])
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])
state.epoch, state.losses = 3, [0.5]
state.commit()
state.epoch = 9
state.losses.append(0.1)  # changed in place: the commit kept a copy
state.restore()
assert (state.epoch, state.losses) == (3, [0.5]), (state.epoch, state.losses)
calls = []

@elastic.run
def train(state, fail_once):
    calls.append(state.epoch)
    state.epoch += 1
    if fail_once and len(calls) == 1:
        raise hvd.HorovodInternalError("a peer failed")
    return state.epoch

print(json.dumps({"result": train(state, True), "calls": calls, "resets": resets, "init": hvd.is_initialized(),
                  "synced": elastic.broadcast_json({"a": [1, 2]})}))
"""

TORCH_STATE = """
import json
import torch
import hvd_selector.torch as hvd

hvd.init()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
state = hvd.elastic.TorchState(model, opt, batch=0)
before = model.weight.detach().clone()
model(torch.ones(1, 2)).sum().backward()
opt.step()
state.batch = 7
state.restore()
assert torch.equal(model.weight, before) and state.batch == 0
assert not opt.state_dict()["state"], "the optimizer's buffers came back to the commit"
opt.zero_grad(set_to_none=True)  # sync() steps an optimizer without state once, with zero gradients (as Horovod)

failed = []

@hvd.elastic.run
def train(state):
    state.batch += 1
    model.weight.data.add_(1.0)
    if not failed:
        failed.append(state.batch)
        raise hvd.HorovodInternalError("a peer failed")
    return state.batch

batch = train(state)
assert torch.equal(model.weight, before + 1.0), "the failed attempt's change was rolled back"

print(json.dumps({"batch": batch, "size": hvd.size()}))
"""


def test_object_state_commit_restore_and_run_recovers_from_a_peer_failure(gloo_build: Build, tmp_path: Path) -> None:
    proc = python(gloo_build, OBJECT_STATE, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    # the first call failed after moving epoch to 4: restored to the commit (3), re-formed (a reset), ran again
    assert got == {"result": 4, "calls": [3, 3], "resets": [1], "init": True, "synced": {"a": [1, 2]}}


def test_torch_state_restores_model_and_optimizer(gloo_build: Build, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = python(gloo_build, TORCH_STATE, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == '{"batch": 1, "size": 1}'


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--min-np", "1"], "--min-np needs --host-discovery-script"),
        (["--blacklist-cooldown-range", "10", "60"], "--blacklist-cooldown-range is not supported"),
        (["--host-discovery-script", "/nonexistent/discover"], "cannot run the host discovery script"),
        (["--host-discovery-script", "SCRIPT", "--min-np", "3"], "1 <= --min-np (3) <= -np (2)"),
        (["--host-discovery-script", "BADSCRIPT"], "is not a host name or IPv4 address"),
        (["--host-discovery-script", "SCRIPT", "-H", "localhost:2"], "-H/--hostfile with --host-discovery-script"),
    ],
)
def test_elastic_bad_input_is_one_line_exit_2(tmp_path: Path, options: list[str], says: str) -> None:
    for name, line in (("SCRIPT", "localhost:2"), ("BADSCRIPT", "-oProxyCommand=x")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho '{line}'\n")
        script.chmod(0o755)
    options = [str(tmp_path / o) if o in ("SCRIPT", "BADSCRIPT") else o for o in options]
    marker = tmp_path / "ran"
    argv = [sys.executable, "-m", "selector_backend", "run", "-np", "2", *options, "touch", str(marker)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not marker.exists()


def test_a_generation_secret_is_wrapped_per_generation_and_worker() -> None:
    """What crosses the control store is not the secret, differs per generation and worker, and unwraps back."""
    control, secret = os.urandom(32), os.urandom(32)
    wrapped = {(g, w): protocol.wrap_secret(control, g, w, secret) for g in (1, 2) for w in ("w1", "w2")}
    assert len(set(wrapped.values())) == 4 and secret.hex() not in wrapped.values()
    for (g, w), text in wrapped.items():
        assert protocol.unwrap_secret(control, g, w, text) == secret
        assert protocol.unwrap_secret(os.urandom(32), g, w, text) != secret  # another job's control secret
    placed = protocol.Assignment(2, 1, 3, 0, 1, "10.0.0.1:4242", wrapped[(2, "w1")])
    assert protocol.Assignment.from_json(placed.to_json()) == placed
