"""Tensor fusion: 1,000 small tensors through grouped_allreduce vs one call each.

2 ranks, for the gloo build and the mpi (Open MPI) build, interleaved rounds,
best of each. Writes benchmarks/results/fusion.json and fusion.png; the
ratio is (1,000 single allreduces) / (one grouped_allreduce). Not a test.

    python -m benchmarks.bench_fusion [--tensors 1000] [--elements 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
ROUNDS = 5


def worker(out: Path, tensors: int, elements: int) -> None:
    import numpy as np

    import hvd_selector as hvd

    hvd.init()
    xs = [np.full(elements, i % 7, dtype=np.float32) for i in range(tensors)]

    def single() -> None:
        for x in xs:
            hvd.allreduce(x, op=hvd.Sum)

    def grouped() -> None:
        hvd.grouped_allreduce(xs, op=hvd.Sum)

    best = {"single_s": float("inf"), "grouped_s": float("inf")}
    for _ in range(ROUNDS):
        for key, fn in (("single_s", single), ("grouped_s", grouped)):
            hvd.barrier()
            start = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
    check = hvd.grouped_allreduce(xs, op=hvd.Sum)
    assert all(float(c[0]) == 2 * (i % 7) * hvd.size() / 2 for i, c in enumerate(check))
    if hvd.rank() == 0:
        out.write_text(json.dumps({**best, "build": hvd.build_info()["variant"]}))
    hvd.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=1000)
    parser.add_argument("--elements", type=int, default=64)
    parser.add_argument("--worker", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.tensors, args.elements)
        return 0
    from devtools import native_builds

    builds = native_builds.benchmark_builds()
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for kind, build in builds.items():
        out = RESULTS / f".fusion-{kind}.json"
        cmd = [
            *native_builds.run_argv(2, Path(__file__)),
            "--worker",
            str(out),
            "--tensors",
            str(args.tensors),
            "--elements",
            str(args.elements),
        ]
        subprocess.run(cmd, env=build.env(HVD_SELECTOR_TIMEOUT="600"), check=True, cwd=RESULTS)
        data = json.loads(out.read_text())
        out.unlink()
        data["speedup"] = data["single_s"] / data["grouped_s"]
        results[kind] = data
        print(
            f"{kind}: {args.tensors} x allreduce {data['single_s'] * 1e3:.1f} ms, grouped "
            f"{data['grouped_s'] * 1e3:.2f} ms, speedup x{data['speedup']:.1f}"
        )
    summary = {
        "command": "python -m benchmarks.bench_fusion " + " ".join(sys.argv[1:]),
        "tensors": args.tensors,
        "elements_per_tensor": args.elements,
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "results": results,
    }
    (RESULTS / "fusion.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(results, RESULTS / "fusion.png", args.tensors)
    return 0


def _plot(results: dict, path: Path, tensors: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    kinds = list(results)
    ax.bar([k + "\none call each" for k in kinds], [results[k]["single_s"] * 1e3 for k in kinds])
    ax.bar([k + "\ngrouped" for k in kinds], [results[k]["grouped_s"] * 1e3 for k in kinds])
    ax.set_yscale("log")
    ax.set_ylabel("ms for all tensors (log)")
    ax.set_title(f"{tensors} small tensors, 2 ranks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
