"""Allreduce bandwidth, 2 ranks, float32 1 KiB .. 256 MiB, side by side with peers.

One run measures, interleaved size by size in the same processes:
  * gloo build of hvd_selector vs torch.distributed (gloo backend, CPU torch),
    both started by ``hvd-selector run -np 2``;
  * mpi build of hvd_selector (Open MPI, the MPI mpi4py uses here) vs
    mpi4py's ``Comm.Allreduce`` on the same MPI, started by mpiexec.
Writes benchmarks/results/allreduce.json and allreduce.png; ratios are
hvd_selector time / peer time (< 1: hvd_selector faster). Not a test.

    python benchmarks/bench_allreduce.py [--max-mib 256] [--min-seconds 0.3]
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


def _builder():
    """The test suite's variant builder (one build per source state, shared)."""
    sys.path.insert(0, str(REPO / "tests" / "native"))
    import native_builds

    return native_builds


def _sizes(max_mib: int) -> list[int]:
    sizes, n = [], 1024
    while n <= max_mib << 20:
        sizes.append(n)
        n *= 4
    return sizes


def _time(fn, min_seconds: float, barrier) -> float:
    """Mean seconds per call over a repetition count every rank agrees on."""
    for _ in range(2):
        fn()
    barrier()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    reps = _agree_reps(max(3, min(2000, int(min_seconds / max(once, 1e-6)))))
    barrier()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


ROUNDS = 3
_agree_reps = None  # set by the worker: int -> max over ranks (outside the timed loop)


def worker(kind: str, out: Path, sizes: list[int], min_seconds: float) -> None:
    global _agree_reps
    import numpy as np

    torch = dist = comm = MPI = None
    if kind == "mpi":
        from mpi4py import MPI

        import hvd_selector as hvd

        hvd.init()
        comm = MPI.COMM_WORLD

        def stop(reps: int) -> int:
            return int(comm.allreduce(reps, op=MPI.MAX))

        peer_name = f"mpi4py ({MPI.Get_library_version().splitlines()[0][:40]})"
        barrier = comm.Barrier
    else:
        import torch
        import torch.distributed as dist

        import hvd_selector as hvd

        torch.set_num_threads(1)  # 2 ranks on 2 cores: no spinning intra-op pool stealing the peer's core
        hvd.init()
        port = int(os.environ["BENCH_TORCH_PORT"])
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=hvd.rank(), world_size=hvd.size())
        flag_t = torch.zeros(1)

        def stop(reps: int) -> int:
            flag_t[0] = float(reps)
            dist.all_reduce(flag_t, op=dist.ReduceOp.MAX)
            return int(flag_t[0])

        peer_name = f"torch.distributed gloo (torch {torch.__version__})"
        barrier = dist.barrier
    _agree_reps = stop
    rows = []
    for nbytes in sizes:
        x = np.ones(nbytes // 4, dtype=np.float32)
        recv = np.empty_like(x)
        tx = None if kind == "mpi" else torch.ones(nbytes // 4, dtype=torch.float32)

        def ours(x=x) -> None:
            hvd.allreduce_(x, op=hvd.Sum)  # in place, like the peers (no output allocation)

        def peer(x=x, recv=recv, tx=tx) -> None:
            if kind == "mpi":
                comm.Allreduce(x, recv, op=MPI.SUM)
            else:
                dist.all_reduce(tx)

        # Interleaved rounds, best of each: the machine is shared, so the
        # minimum is the least disturbed estimate for both sides alike.
        t_hvd = t_peer = float("inf")
        for _ in range(ROUNDS):
            t_hvd = min(t_hvd, _time(ours, min_seconds, barrier))
            t_peer = min(t_peer, _time(peer, min_seconds, barrier))
        rows.append({"bytes": nbytes, "hvd_s": t_hvd, "peer_s": t_peer})
        if hvd.rank() == 0:
            print(
                f"{kind} {nbytes:>10d} B  hvd {t_hvd * 1e6:10.1f} us  peer {t_peer * 1e6:10.1f} us  "
                f"ratio {t_hvd / t_peer:5.2f}",
                flush=True,
            )
    if hvd.rank() == 0:
        out.write_text(json.dumps({"peer": peer_name, "build": hvd.build_info()["variant"], "rows": rows}))
    if kind != "mpi":
        dist.destroy_process_group()
    hvd.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--worker", choices=["gloo", "mpi"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sizes = _sizes(args.max_mib)
    if args.worker:
        worker(args.worker, args.out, sizes, args.min_seconds)
        return 0

    b = _builder()
    builds = b.benchmark_builds()
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for kind, build in builds.items():
        out = RESULTS / f".allreduce-{kind}.json"
        env = build.env(BENCH_TORCH_PORT="29561", HVD_SELECTOR_TIMEOUT="600", OMP_NUM_THREADS="1")
        cmd = [
            *b.run_argv(2, Path(__file__)),
            "--worker",
            kind,
            "--out",
            str(out),
            "--max-mib",
            str(args.max_mib),
            "--min-seconds",
            str(args.min_seconds),
        ]
        subprocess.run(cmd, env=env, check=True, cwd=RESULTS)  # not REPO: its hvd_selector is unbuilt
        results[kind] = json.loads(out.read_text())
        out.unlink()
    summary = {
        "command": "python benchmarks/bench_allreduce.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "results": results,
    }
    (RESULTS / "allreduce.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(results, RESULTS / "allreduce.png")
    return 0


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for kind, data in results.items():
        rows = data["rows"]
        x = [r["bytes"] for r in rows]
        ax.plot(x, [r["bytes"] / r["hvd_s"] / 1e6 for r in rows], marker="o", label=f"hvd_selector {kind}")
        ax.plot(x, [r["bytes"] / r["peer_s"] / 1e6 for r in rows], marker="x", linestyle="--", label=data["peer"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes, float32)")
    ax.set_ylabel("algorithm bandwidth (MB/s)")
    ax.set_title("allreduce, 2 ranks on one host")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
