"""Collectives at 2..64 ranks: hvd-selector's gloo build beside Open MPI (and MPICH) in one run.

For every rank count, size and mode one job per library runs allreduce,
allgather and broadcast of float32 buffers, one after another:
  * hvd-selector's gloo build under ``hvd-selector run -np N`` (its
    ``init()`` time per rank is recorded too: the store-scale comparison with
    torch.distributed joins it);
  * Open MPI's mpi4py (``Allreduce``/``Allgather``/``Bcast``) under
    ``mpirun --oversubscribe``;
  * MPICH from its pip wheels (build/mpich-venv, as bench_allreduce makes
    it) under its own mpiexec (``--mpich``), in the ``shm`` mode and in the
    ``tcp`` mode with ``MPIR_CVAR_NOLOCAL=1`` (every rank treated as remote:
    no shared memory); not across namespace hosts (its launcher has no ssh
    configuration of the cluster's).
Modes: ``tcp`` (one host, network only: HVD_SELECTOR_SHM=0 against
``--mca btl tcp,self``), ``shm`` (one host, defaults: shared memory
against Open MPI's vader) and ``hosts`` (``--hosts`` network-namespace hosts
on a veth bridge, tests/multihost/netns.py, the ranks spread evenly and
started over ssh: hvd-selector's hierarchy against Open MPI over tcp (its
vader segfaults when its "nodes" are namespaces of one kernel); the
launchers run in one more namespace). ``hosts-tcp`` is ``hosts`` with
HVD_SELECTOR_SHM=0: every rank on the network, the far end from one leader
per host. Each figure is the slowest rank's mean time per
call; ratios are hvd-selector / peer (< 1: hvd-selector faster). Results go
to benchmarks/results/scale.json (``--out`` to change). Not a test.

    python -m benchmarks.bench_scale [--ranks 2,4,8,16,32,64]
        [--sizes 4K,256K,4M,64M] [--modes tcp,shm,hosts,hosts-tcp] [--hosts 4]
        [--collectives allreduce,allgather,broadcast] [--iters 20] [--mpich]
        [--fresh-inputs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.bench_allreduce import REPO, RESULTS, _builder, _mpich_venv

COLLECTIVES = ("allreduce", "allgather", "broadcast")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """4K, 256K, 4M, 64M or a plain byte count."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in UNITS:
        return int(text[:-1]) * UNITS[text[-1]]
    return int(text)


def size_label(nbytes: int) -> str:
    """4 KiB, 4 MiB (the inverse of parse_size for round sizes)."""
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _iterations(nbytes: int, iters: int) -> int:
    """Fewer calls for big buffers, so a 64 MiB point takes seconds, not minutes."""
    return max(2, min(iters, iters * (1 << 20) // max(nbytes, 1)))


def _measure(calls: dict[str, object], sizes: list[int], iters: int, barrier, slowest) -> list[dict]:
    """Mean seconds per call of each collective and size, the slowest rank's."""
    rows = []
    for name, call in calls.items():
        for nbytes in sizes:
            n = _iterations(nbytes, iters)
            call(nbytes)  # type: ignore[operator]  # warm-up: buffers, connections
            barrier()
            start = time.perf_counter()
            for _ in range(n):
                call(nbytes)  # type: ignore[operator]
            rows.append({"collective": name, "bytes": nbytes, "seconds": slowest((time.perf_counter() - start) / n)})
    return rows


def _fresh_inputs(calls: dict[str, Callable[[int], None]], bufs: dict) -> dict[str, Callable[[int], None]]:
    """Each call after writing its input buffer, as a training step's new gradients are: an input
    that never changes stays in every reader's cache, which flatters a library whose ranks read
    the peer's buffer itself (Open MPI's single-copy reads) over one that copies through a
    segment the writer rewrites every call (hvd-selector's slots). Both libraries pay the write."""

    def fresh(call: Callable[[int], None]) -> Callable[[int], None]:
        def with_new_input(n: int) -> None:
            bufs[n].fill(1.0)
            call(n)

        return with_new_input

    return {name: fresh(call) for name, call in calls.items()}


def hvd_worker(out: Path, sizes: list[int], collectives: list[str], iters: int, namespaces: bool, fresh: bool) -> None:
    import numpy as np

    if namespaces:  # namespace hosts share one kernel: tell shared memory where the hosts end
        os.environ["HVD_SELECTOR_HOST_ID"] = os.environ["HVD_SELECTOR_HOST"]

    import hvd_selector as hvd
    from hvd_selector._api import _core

    start = time.perf_counter()
    hvd.init()
    init_s = time.perf_counter() - start
    p = hvd.size()

    def slowest(x: float) -> float:
        return float(hvd.allreduce(np.array([x]), op=hvd.Max)[0])

    bufs = {n: np.ones(n // 4, dtype=np.float32) for n in sizes}
    gathered = {n: np.empty(max(1, n // 4 // p) * p, dtype=np.float32) for n in sizes}

    def allreduce(n: int) -> None:
        hvd.allreduce_(bufs[n], op=hvd.Sum)

    def allgather(n: int) -> None:
        # Every rank gives n/p bytes: the output is n bytes, allocated once, as MPI's below.
        # hvd.allgather allocates a new output per call (a 64 MiB one costs its page faults
        # every call, which MPI's preallocated buffer does not), so the core is called as it
        # does: the first dimensions' exchange, then the data into the given output.
        piece = bufs[n][: max(1, n // 4 // p)]
        _core.allgather(piece, gathered[n], _core.allgather_prepare(piece))

    def broadcast(n: int) -> None:  # in place, as MPI's Bcast (hvd.broadcast copies first)
        _core.broadcast(bufs[n], 0)

    calls = {c: {"allreduce": allreduce, "allgather": allgather, "broadcast": broadcast}[c] for c in collectives}
    calls = _fresh_inputs(calls, bufs) if fresh else calls
    rows = _measure(calls, sizes, iters, hvd.barrier, slowest)
    init_max = slowest(init_s)
    if hvd.rank() == 0:
        info = hvd.build_info()
        transport = info["transport"].split(";")[0]  # without the per-pair list
        out.write_text(json.dumps({"init_s": init_max, "transport": transport, "rows": rows}))
    hvd.shutdown()


def mpi_worker(out: Path, sizes: list[int], collectives: list[str], iters: int, fresh: bool) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    p = comm.size
    bufs = {n: np.ones(n // 4, dtype=np.float32) for n in sizes}
    recv = {n: np.empty_like(bufs[n]) for n in sizes}
    gathered = {n: np.empty(max(1, n // 4 // p) * p, dtype=np.float32) for n in sizes}

    def allreduce(n: int) -> None:
        comm.Allreduce(bufs[n], recv[n], op=MPI.SUM)

    def allgather(n: int) -> None:
        comm.Allgather(bufs[n][: max(1, n // 4 // p)], gathered[n])

    def broadcast(n: int) -> None:
        comm.Bcast(bufs[n], root=0)

    calls = {c: {"allreduce": allreduce, "allgather": allgather, "broadcast": broadcast}[c] for c in collectives}
    calls = _fresh_inputs(calls, bufs) if fresh else calls
    rows = _measure(calls, sizes, iters, comm.Barrier, lambda x: float(comm.allreduce(x, op=MPI.MAX)))
    if comm.rank == 0:
        out.write_text(json.dumps({"library": MPI.Get_library_version().splitlines()[0][:60], "rows": rows}))


def _job(kind: str, mode: str, ranks: int, args: argparse.Namespace, build, cluster=None) -> dict | None:
    """One job of `kind` (hvd, openmpi, mpich); its rank 0's JSON, or None when it failed."""
    out = RESULTS / f".scale-{kind}-{mode}-{ranks}.json"
    out.unlink(missing_ok=True)
    tail = ["--worker", kind, "--out", str(out), "--sizes", ",".join(map(str, args.size_list))]
    tail += ["--collectives", ",".join(args.collective_list), "--iters", str(args.iters)]
    tail += ["--fresh-inputs"] if args.fresh_inputs else []
    script = str(Path(__file__))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    slots = ",".join(f"{h.address}:{-(-ranks // args.hosts)}" for h in cluster.hosts[1:]) if cluster else ""
    if kind == "hvd":
        cmd = _builder().run_argv(ranks, Path(script), *tail)
        env = build.env(HVD_SELECTOR_TIMEOUT="300", OMP_NUM_THREADS="1")
        if mode in ("tcp", "hosts-tcp"):
            env["HVD_SELECTOR_SHM"] = "0"
        if cluster is not None:  # run -np N -H ... --ssh-config-file ... python script
            ssh = ["-H", slots, "--ssh-config-file", str(cluster.ssh_config)]
            cmd = cluster.hosts[0].exec_argv(*cmd[:6], *ssh, *cmd[6:])
            cmd.append("--namespace-hosts")  # the launcher forwards argv, not this environment, over ssh
    elif kind == "openmpi" and cluster is not None:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), "--host", slots]
        cmd += ["--mca", "plm_rsh_agent", f"ssh -F {cluster.ssh_config}", "--mca", "btl_tcp_if_include", "eth0"]
        # vader (shared memory) segfaults in Open MPI 4.1 when "nodes" are namespaces of one kernel: tcp only
        cmd += ["--mca", "oob_tcp_if_include", "eth0", "--mca", "btl", "tcp,self"]
        cmd += ["-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS"]
        cmd = cluster.hosts[0].exec_argv(*cmd, sys.executable, script, *tail)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    elif kind == "openmpi":
        btl = ["--mca", "btl", "tcp,self"] if mode == "tcp" else []
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), *btl]
        cmd += [sys.executable, script, *tail]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    else:
        venv = _mpich_venv()
        cmd = [str(venv / "bin" / "mpiexec"), "-n", str(ranks), str(venv / "bin" / "python"), script, *tail]
        if mode == "tcp":
            env["MPIR_CVAR_NOLOCAL"] = "1"
    try:
        proc = subprocess.run(cmd, env=env, cwd=RESULTS, capture_output=True, text=True, timeout=args.job_timeout)
    except subprocess.TimeoutExpired:
        print(f"{kind} {mode} {ranks} ranks: timed out after {args.job_timeout} s", flush=True)
        return None
    if proc.returncode or not out.exists():
        print(f"{kind} {mode} {ranks} ranks failed ({proc.returncode}): {proc.stderr[-600:]}", flush=True)
        return None
    data = json.loads(out.read_text())
    out.unlink()
    return data


def run_matrix(args: argparse.Namespace) -> dict:
    build = _builder().build_variant("gloo-x86_64_v3", _builder().GLOO)
    result: dict[str, list[dict]] = {"points": [], "init": []}
    for mode in args.mode_list:
        cluster = _cluster(args.hosts) if mode.startswith("hosts") else None
        try:
            for ranks in args.rank_list:
                _run_point(mode, ranks, args, build, cluster, result)
        finally:
            if cluster is not None:
                cluster.close()
    return result


def _cluster(hosts: int):
    """``hosts`` namespace hosts plus one for the launchers (tests/multihost/netns.py)."""
    import tempfile

    from tests.multihost import netns

    return netns.create(hosts + 1, Path(tempfile.mkdtemp(prefix="bench-scale-")))


def _run_point(mode: str, ranks: int, args: argparse.Namespace, build, cluster, result: dict) -> None:
    """hvd-selector's job and its peers' at one rank count; their rows joined as ratios."""
    kinds = ["hvd", "openmpi", *(["mpich"] if args.mpich and mode in ("shm", "tcp") else [])]
    jobs = {kind: _job(kind, mode, ranks, args, build, cluster) for kind in kinds}
    hvd = jobs.pop("hvd")
    if hvd is None:
        return
    result["init"].append({"mode": mode, "ranks": ranks, "init_s": hvd["init_s"], "transport": hvd["transport"]})
    for row in hvd["rows"]:
        point = {"mode": mode, "ranks": ranks, "collective": row["collective"], "bytes": row["bytes"]}
        point["hvd_s"] = row["seconds"]
        for kind, data in jobs.items():
            for r in (data or {}).get("rows", []):
                if (r["collective"], r["bytes"]) == (row["collective"], row["bytes"]):
                    point[f"{kind}_s"] = r["seconds"]
                    point[f"vs_{kind}"] = row["seconds"] / r["seconds"]
        result["points"].append(point)
        _print_point(point)


def _print_point(p: dict) -> None:
    peers = [
        f"{kind} {p[kind + '_s'] * 1e3:9.3f} ms ratio {p['vs_' + kind]:5.2f}" if f"{kind}_s" in p else f"{kind} -"
        for kind in ("openmpi", "mpich")
    ]
    print(
        f"{p['mode']:4s} {p['ranks']:3d} ranks {p['collective']:9s} {p['bytes']:>9d} B  "
        f"hvd {p['hvd_s'] * 1e3:9.3f} ms  " + "  ".join(peers),
        flush=True,
    )


def table(result: dict) -> str:
    """Markdown: one row per point, ratios against each peer."""
    lines = [
        "| mode | ranks | collective | bytes | hvd-selector | Open MPI | ratio | MPICH | ratio |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in result["points"]:
        cells = [p["mode"], str(p["ranks"]), p["collective"], str(p["bytes"]), f"{p['hvd_s'] * 1e3:.3f} ms"]
        for kind in ("openmpi", "mpich"):
            cells += [f"{p[kind + '_s'] * 1e3:.3f} ms", f"{p['vs_' + kind]:.2f}x"] if f"{kind}_s" in p else ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    """Time per call against ranks, one panel per collective; False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(COLLECTIVES), figsize=(15, 4.5), squeeze=False)
    for ax, coll in zip(axes[0], COLLECTIVES, strict=True):
        pts = [p for p in result["points"] if p["collective"] == coll]
        for mode in sorted({p["mode"] for p in pts}):
            for nbytes in sorted({p["bytes"] for p in pts}):
                sel = sorted((p for p in pts if p["mode"] == mode and p["bytes"] == nbytes), key=lambda p: p["ranks"])
                x = [p["ranks"] for p in sel]
                line = ax.plot(x, [p["hvd_s"] * 1e3 for p in sel], marker="o", label=f"hvd {mode} {size_label(nbytes)}")
                peer = [p.get("openmpi_s", float("nan")) * 1e3 for p in sel]
                ax.plot(
                    x,
                    peer,
                    marker="x",
                    linestyle="--",
                    color=line[0].get_color(),
                    label=f"Open MPI {mode} {size_label(nbytes)}",
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (one 2-core machine)")
        ax.set_ylabel("ms per call (slowest rank)")
        ax.set_title(coll)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8,16,32,64")
    parser.add_argument("--sizes", default="4K,256K,4M,64M")
    parser.add_argument("--modes", default="tcp,shm")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--hosts", type=int, default=4, help="namespace hosts of the hosts mode")
    parser.add_argument(
        "--mpich", action="store_true", help="MPICH (pip wheels) beside Open MPI in the shm and tcp modes"
    )
    parser.add_argument("--job-timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--worker")
    parser.add_argument("--namespace-hosts", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plot", action="store_true", help="also write <out>.png (matplotlib)")
    parser.add_argument(
        "--fresh-inputs",
        action="store_true",
        help="write every input buffer before each call, in both libraries (as new gradients each step)",
    )
    args = parser.parse_args(argv)
    args.size_list = [parse_size(s) for s in args.sizes.split(",")]
    args.collective_list = [c for c in args.collectives.split(",") if c]
    unknown = set(args.collective_list) - set(COLLECTIVES)
    if unknown:
        parser.error(f"unknown collective(s) {', '.join(sorted(unknown))}; choose from {', '.join(COLLECTIVES)}")
    if args.worker:
        if args.worker == "hvd":
            hvd_worker(
                args.out, args.size_list, args.collective_list, args.iters, args.namespace_hosts, args.fresh_inputs
            )
        else:
            mpi_worker(args.out, args.size_list, args.collective_list, args.iters, args.fresh_inputs)
        return 0
    args.rank_list = [int(r) for r in args.ranks.split(",")]
    args.mode_list = [m for m in args.modes.split(",") if m]
    if set(args.mode_list) - {"tcp", "shm", "hosts", "hosts-tcp"}:
        parser.error("--modes takes tcp, shm, hosts and hosts-tcp")
    RESULTS.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    result = run_matrix(args)
    result["command"] = "python -m benchmarks.bench_scale " + " ".join(sys.argv[1:] if argv is None else argv)
    result["machine"] = f"{os.cpu_count()} cores, load {load[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    if args.plot and not plot(result, args.out.with_suffix(".png")):
        print("matplotlib is not installed: no plot", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
