"""4 MiB allgather at 2 ranks over shared memory, per HVD_SELECTOR_SHM_SLOT: the cost of the pieces.

The shared-memory allgather moves its output in slot-sized pieces, one all-rank
meeting each; this times ``hvd.allgather`` (a fresh output), the same into a kept
output (``_core.allgather_prepare`` + ``_core.allgather``) and the agreement round
alone, for each slot size given, in one invocation. Not a test; hvd-selector only
(bench_scale has the peers).

    python -m benchmarks.bench_shm_pieces [--slots 262144,1048576,4194304] [--calls 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_allreduce import RESULTS, _builder


def worker(calls: int) -> None:
    import numpy as np

    import hvd_selector as hvd
    from hvd_selector._api import _core

    hvd.init()
    part = np.ones((4 << 20) // 4 // hvd.size(), dtype=np.float32)
    kept = np.empty(part.size * hvd.size(), dtype=np.float32)

    def into_kept() -> None:
        _core.allgather(part, kept, _core.allgather_prepare(part))

    ways = {
        "hvd.allgather": lambda: hvd.allgather(part),
        "into a kept output": into_kept,
        "agreement only": lambda: _core.allgather_prepare(part),
    }
    for name, fn in ways.items():
        for _ in range(3):
            fn()
        hvd.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        seconds = float(hvd.allreduce(np.array([(time.perf_counter() - start) / calls]), op=hvd.Max)[0])
        if hvd.rank() == 0:
            print(f"  {name}: {seconds * 1e3:.3f} ms", flush=True)
    hvd.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="262144,1048576,4194304")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.calls)
        return 0
    build = _builder().build_variant("gloo-x86_64_v3", _builder().GLOO)
    for slot in args.slots.split(","):
        print(f"HVD_SELECTOR_SHM_SLOT={slot}", flush=True)
        cmd = _builder().run_argv(2, Path(__file__), "--worker", "--calls", str(args.calls))
        env = build.env(OMP_NUM_THREADS="1", HVD_SELECTOR_SHM_SLOT=slot)
        subprocess.run(cmd, env=env, cwd=RESULTS, check=True, timeout=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
