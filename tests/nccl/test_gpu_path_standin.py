"""The core's GPU path without a GPU, through the stand-in plugin.

The nccl variant is built for real (its core compiled with HVD_HAVE_NCCL);
the tests put the stand-in (tests/nccl/standin/: the plugin ABI over host
memory, executing the real plugin's reduction plan with the CPU kernels) in
the real plugin's place, next to _core, where the core dlopen()s it. Arrays
that say they are CUDA tensors (tests.native.workers.fake_cuda.DeviceArray)
then take the whole GPU path of the core and the Python API at 2 ranks:
dispatch to the plugin, out-of-place buffers, every dtype's codes, fusion of
GPU tensors, making the communicator over the CPU controller, error
translation and peer failure. What only a GPU shows (CUDA kernels, NCCL
itself) is in test_nccl_plugin_gpu.py (marked gpu).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from devtools.native_builds import Build, python, run_argv

pytestmark = pytest.mark.slow

WORKER = Path(__file__).resolve().parent / "standin_worker.py"
TIMEOUT = 5.0


def _job(build: Build, tmp_path: Path, scenario: str, **env: str) -> tuple[int, dict[int, Any], str]:
    """Run 2 ranks of the worker: (exit code, each rank's outcome, the stand-in's call log)."""
    segments, out, log = tmp_path / "segments", tmp_path / "out", tmp_path / "calls.log"
    segments.mkdir()
    out.mkdir()
    settings = {
        "HVD_SELECTOR_TIMEOUT": f"{TIMEOUT:g}",
        "HVD_STANDIN_DIR": str(segments),
        "HVD_STANDIN_LOG": str(log),
        **env,
    }
    proc = subprocess.run(
        run_argv(2, WORKER, str(out), scenario),
        cwd=tmp_path,
        env=build.env(**settings),
        capture_output=True,
        text=True,
        timeout=180,
    )
    outcomes = {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1) if (out / f"rank{r}.json").exists()}
    assert not list(segments.iterdir()), "the stand-in's shared segment was left behind"
    return proc.returncode, outcomes, log.read_text() if log.exists() else ""


def _calls(log: str, what: str, rank: int) -> list[dict[str, str]]:
    """The stand-in's log lines of one kind on one rank, as key=value dicts."""
    found = []
    for line in log.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("rank") == str(rank) and f" {what} " in f" {line} ":
            found.append(fields)
    return found


def test_every_dtype_op_and_scaling_matches_the_cpu_path(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "reductions")
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    for outcome in outcomes.values():
        assert outcome["runs"] == 10 * 5 * 5 * 2 and outcome["bad"] == []
    # Out of place reached the plugin as two buffers (no copy into out first), in place as one.
    sends = _calls(log, "allreduce", 0)
    assert len(sends) == 500
    assert sum(c["send"] != c["recv"] for c in sends) == sum(c["send"] == c["recv"] for c in sends) == 250


def test_fused_lists_of_mixed_dtypes_and_devices_match_the_cpu_path(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "grouped")
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    for outcome in outcomes.values():
        assert outcome["runs"] == 40 and outcome["bad"] == []
    # The CPU tensor in the middle never reached the plugin; a 64-byte threshold split the rest.
    grouped = _calls(log, "grouped_allreduce", 0) + _calls(log, "allreduce", 0)
    assert {int(c["dtype"]) for c in grouped} == {2, 8, 9, 0, 1, 7}
    assert len(grouped) == 40 * 7  # one line per GPU tensor, whatever the chunking


def test_allgather_broadcast_alltoall_move_every_dtype(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, _ = _job(standin_build, tmp_path, "moves")
    assert code == 0 and [o["bad"] for o in outcomes.values()] == [[], []], outcomes


def test_python_api_reduces_gpu_tensors_out_of_place(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "api")
    assert code == 0, outcomes
    for rank, outcome in outcomes.items():
        assert outcome["y_is_gpu"] and outcome["x"] == [float(i + rank) for i in range(6)]  # input untouched
        assert outcome["y"] == [0.25, 0.75, 1.25, 1.75, 2.25, 2.75]  # Average of 0.5 * (x0 + x1)
        assert outcome["ys"] == [[1.0] * 4, [3.0] * 4, [5.0] * 4] and outcome["xs"][0] == [float(rank)] * 4
        # The plugin read the caller's tensor and wrote the new one: no clone in between.
        (call,) = _calls(log, "allreduce", rank)
        assert [int(call["send"], 16), int(call["recv"], 16)] == outcome["pointers"]
        grouped = [[int(c["send"], 16), int(c["recv"], 16)] for c in _calls(log, "grouped_allreduce", rank)]
        assert grouped == outcome["grouped_pointers"]
        # The float32 prescale rode in the reduction (PreMulSum), AVERAGE's 1/2 in the postscale pass.
        assert (call["red"], call["premul"], call["plan_pre"], call["plan_post"]) == ("4", "0.5", "1", "0.5")


def test_the_premulsum_switch_scales_in_a_separate_pass(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "api", HVD_SELECTOR_NCCL_PREMULSUM="0")
    assert code == 0 and outcomes[0]["y"] == [0.25, 0.75, 1.25, 1.75, 2.25, 2.75]
    (call,) = _calls(log, "allreduce", 0)
    assert (call["red"], call["premul"], call["plan_pre"]) == ("0", "1", "0.5")


@pytest.mark.parametrize("scenario", ["die_after_init", "die_after_gpu_op"])
def test_a_peer_dead_before_a_gpu_op_is_a_peer_failure(standin_build: Build, tmp_path: Path, scenario: str) -> None:
    code, outcomes, _ = _job(standin_build, tmp_path, scenario)
    assert code == 3, outcomes  # the dead rank's code; the survivor exited cleanly
    survivor = outcomes[0]
    assert survivor["clean_shutdown"]
    for step in ("first", "second", "cpu"):
        assert survivor[step]["error"] == "PeerFailureError", survivor
        assert survivor[step]["seconds"] < TIMEOUT, survivor
    assert "lost the peer rank 1" in survivor["first"]["message"]


def test_a_peer_dying_inside_the_plugin_is_a_peer_failure_and_aborts(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "die_inside", HVD_STANDIN_EXIT_AT="1:2")
    assert code == 3, outcomes
    survivor = outcomes[0]
    assert survivor["clean_shutdown"]
    first = survivor["first"]
    assert first["error"] == "PeerFailureError" and first["seconds"] < TIMEOUT, first
    assert re.fullmatch(r"allreduce \(GPU\): allreduce: stand-in: rank 1 \(process \d+\) is gone", first["message"])
    assert survivor["second"]["error"] == survivor["cpu"]["error"] == "PeerFailureError", survivor
    # After the failure the communicator is aborted (nobody to leave with), then freed.
    steps = [line.split()[1] for line in log.splitlines() if line.startswith("rank=0 ") and "send=" not in line]
    assert steps == ["init", "abort", "finalize"]


def test_a_hung_peer_inside_the_plugin_times_out_and_the_job_goes_on(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, log = _job(standin_build, tmp_path, "stall_inside", HVD_STANDIN_STALL_AT="1:2")
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    waiting, hung = outcomes[0], outcomes[1]
    assert waiting["first"]["error"] == "CollectiveTimeoutError", waiting
    assert TIMEOUT <= waiting["first"]["seconds"] < TIMEOUT + 3
    assert hung["first"]["error"] == "PeerFailureError" and "another rank aborted" in hung["first"]["message"]
    for outcome in outcomes.values():  # GPU operations stop; the CPU communicator still works
        assert outcome["second"]["error"] == "PeerFailureError"
        assert "GPU operations stopped after an earlier failure" in outcome["second"]["message"]
        assert outcome["cpu"] == {"error": None, "seconds": outcome["cpu"]["seconds"]}
        assert outcome["clean_shutdown"]
    for rank in (0, 1):
        steps = [
            line.split()[1] for line in log.splitlines() if line.startswith(f"rank={rank} ") and "send=" not in line
        ]
        assert steps == ["init", "abort", "finalize"]


@pytest.mark.parametrize("where", ["cpu_op", "plugin_op"])  # ("gpu" would read as the gpu marker)
def test_shutdown_waits_for_a_thread_inside_a_collective(standin_build: Build, tmp_path: Path, where: str) -> None:
    """The communicator is never freed under a thread still inside a collective (that was a SIGSEGV)."""
    env = {"HVD_STANDIN_STALL_AT": "1:2"} if where == "plugin_op" else {}
    code, outcomes, _ = _job(standin_build, tmp_path, f"finalize_during_{where.split('_')[0]}", **env)
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    rank0 = outcomes[0]
    assert rank0["thread_done"] and rank0["clean_shutdown"], rank0
    # The thread ended with its own error (rank 1 left, or hung past the timeout), then shutdown went on.
    assert rank0["op"]["error"] in ("PeerFailureError", "CollectiveTimeoutError"), rank0
    assert rank0["shutdown_seconds"] < TIMEOUT + 3


def test_a_rank_that_cannot_make_the_nccl_id_fails_every_rank_with_its_reason(
    standin_build: Build, tmp_path: Path
) -> None:
    code, outcomes, _ = _job(standin_build, tmp_path, "no_unique_id", HVD_STANDIN_FAIL_UNIQUE_ID="1")
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    for outcome in outcomes.values():
        assert outcome["gpu"]["error"] == "UnavailableError"
        assert (
            outcome["gpu"]["message"]
            == "GPU operations unavailable: rank 0: nccl unique id: stand-in: no unique id today"
        )
        assert outcome["cpu"] == [2.0, 2.0]  # the job goes on with CPU tensors


def test_a_tensor_on_another_device_is_refused_on_the_calling_rank(standin_build: Build, tmp_path: Path) -> None:
    code, outcomes, _ = _job(standin_build, tmp_path, "wrong_device")
    assert code == 0 and sorted(outcomes) == [0, 1], outcomes
    for outcome in outcomes.values():
        assert outcome["error"] == "ValueError"
        assert outcome["message"].startswith(
            "allreduce: the tensor is on CUDA device 1 but this rank's communicator uses"
        )


def test_a_plugin_of_another_abi_is_refused_with_one_line(standin_build: Build, tmp_path: Path) -> None:
    code = (
        "import numpy as np, hvd_selector as h\n"
        "from tests.native.workers.fake_cuda import DeviceArray\n"
        "h.init()\n"
        "try:\n h.allreduce(DeviceArray(np.ones(4, np.float32)))\n"
        "except h.UnavailableError as e:\n print(e)\n"
    )
    proc = python(standin_build, code, cwd=tmp_path, HVD_STANDIN_ABI="1")
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("GPU operations unavailable: ")
    assert lines[0].endswith("/libhvd_nccl.so speaks plugin ABI 1, core expects 2; reinstall hvd-selector")
