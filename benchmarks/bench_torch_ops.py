"""Small-op rate of hvd_selector.torch, 2 ranks (gloo build), side by side with its peer.

Every collective of hvd_selector.torch goes through the background engine,
which first agrees with the other ranks (by name) on what is ready; the
peer is the numpy-level API in the same processes, which calls the native
core directly (no engine, no negotiation round). Interleaved rounds of:
  * ``sync``:  1,000 ``hvd.allreduce`` of 4 float32, one after another;
  * ``async``: 1,000 ``hvd.allreduce_async`` then 1,000 ``synchronize``
    (negotiated in few rounds, fused);
  * ``numpy``: 1,000 ``hvd_selector.allreduce`` (the peer).
Reports ops/s (best round of each job) with the load average before and
after each job; ``--baseline`` alternates the jobs with an older copy of
hvd_selector (a stage directory holding its Python files and the same
_core), for before/after numbers from one run. Writes
benchmarks/results/torch_ops.json. Not a test; run from the repository root:

    python -m benchmarks.bench_torch_ops [--ops 1000] [--rounds 5] [--baseline DIR:REPO]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"


def worker(out: Path, ops: int, rounds: int) -> None:
    import numpy as np
    import torch

    import hvd_selector
    import hvd_selector.torch as hvd

    hvd.init()
    t = torch.ones(4)
    a = np.ones(4, dtype=np.float32)

    def sync() -> None:
        for _ in range(ops):
            hvd.allreduce(t, op=hvd.Sum)

    def burst() -> None:
        handles = [hvd.allreduce_async(t, op=hvd.Sum) for _ in range(ops)]
        for h in handles:
            hvd.synchronize(h)

    def direct() -> None:
        for _ in range(ops):
            hvd_selector.allreduce(a, op=hvd_selector.Sum)

    best: dict[str, float] = {}
    for _ in range(rounds):
        for label, fn in (("sync", sync), ("async", burst), ("numpy", direct)):
            hvd.barrier()
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            best[label] = min(best.get(label, seconds), seconds)
    if hvd.rank() == 0:
        out.write_text(json.dumps({k: ops / v for k, v in best.items()}))
    hvd.shutdown()


def _job(env: dict[str, str], ops: int, rounds: int) -> dict[str, float] | None:
    from devtools import native_builds

    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"torch_ops.{os.getpid()}.json"
    argv = native_builds.run_argv(2, Path(__file__), "--worker", str(out), "--ops", str(ops), "--rounds", str(rounds))
    RESULTS.mkdir(exist_ok=True)  # the cwd, not REPO: the launcher must import the built hvd_selector
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=RESULTS)
    if proc.returncode or not out.exists():
        print(proc.stdout[-3000:] + proc.stderr[-3000:])
        return None
    rates: dict[str, float] = json.loads(out.read_text())
    out.unlink()
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="PYTHONPATH of an older hvd_selector: its jobs alternate with this one's")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.ops, args.rounds)
        return 0
    from devtools import native_builds

    env = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO).env()
    jobs = {"this": env}
    if args.baseline:
        jobs["baseline"] = {**env, "PYTHONPATH": args.baseline}
    record: dict[str, Any] = {"ops": args.ops, "runs": []}
    for _ in range(2):  # alternate, twice: a change in the machine's load shows as a spread
        for label, job_env in jobs.items():
            load_before = os.getloadavg()
            rates = _job(job_env, args.ops, args.rounds)
            if rates is None:
                return 4
            run = {"code": label, "ops_per_s": rates, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
            record["runs"].append(run)
            print(json.dumps(run))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "torch_ops.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
