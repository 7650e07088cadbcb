"""Rendezvous and init() time at scale, side by side with torch.distributed, in one run.

Two measurements, each run for both sides in the same invocation, rounds
interleaved (hvd_selector, torch, hvd_selector, torch ...), the median round
kept (the load average is printed before and after: on a shared machine it
moves the figures more than anything else):

* **store rendezvous** at --ranks (default 16,64,256): the launcher's store
  (``rendezvous.StoreServer``, one event-loop thread in this process) against
  torch.distributed's ``TCPStore`` (its libuv server, in this process). The
  clients are forked processes, one per simulated rank as in a real job
  (--workers N spreads them as threads over N processes instead: fewer
  processes for the scheduler, a gentler load than a job's), one connection
  per simulated rank, every client doing what
  a rank's ``init()`` does through the store (``buildmix.exchange`` and
  ``tcp_mesh.cpp``'s ``connect_mesh``): two gathers, each one set of this
  rank's record and one wait for every rank's (the build records, then the
  data addresses with rank 0's mesh nonce). hvd_selector's store does a
  gather in one request (``StoreClient.gather``); torch's ``TCPStore`` as
  ``set`` then ``multi_get`` of every key (which waits for them).
  The time is from the go signal (clients not yet connected) to
  the last client done, so it includes connecting and the handshake.
* **full init** at --init-ranks (default 4,8,16): real rank processes
  (forked from one parent that imported both libraries, so interpreter
  start-up is left out) calling ``hvd_selector.init()`` of the gloo build
  (the store served as the launcher serves it) and, separately,
  ``torch.distributed.init_process_group("gloo")`` over ``tcp://``; the time
  is from the go signal to the last rank's return.

Ratios are hvd_selector / torch (< 1: hvd_selector faster). The init rows
also give the CPU seconds each side spent (every rank, plus the process
serving the store; median of rounds: on a loaded machine the less noisy
figure), and the slowest rank's time in each phase of ``hvd_selector.init()``
(store connect + handshake, the build exchange, the core's ``init_gloo``:
mesh addresses, TCP connects and handshakes, shared memory). As root the
benchmark runs itself in a private mount namespace whose resolv.conf names
no server (see ``_without_dns``). Prints the result as JSON; writes it
only where ``--write PATH`` says (``--write benchmarks/results/init.json``
updates the recorded figures), so a plain run leaves the tree clean.
Not a test.

    python -m benchmarks.bench_init [--ranks 16,64,256] [--init-ranks 4,8,16]
        [--workers 0] [--rounds 5] [--write PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECORD = b"r" * 300  # about one rank's build record (buildmix.record as JSON)
ADDRESS = b"127.0.0.1:40000"


def _init_pattern(rank: int, size: int, gather: Any) -> None:
    """The store traffic of one rank's init(): buildmix.exchange's gather of build records, then
    connect_mesh's gather of data addresses (rank 0's carries the mesh nonce)."""
    records = gather("build/", rank, size, RECORD)
    addresses = gather("tcp/mesh/", rank, size, (b"n" * 32 if rank == 0 else b"") + ADDRESS)
    assert len(records) == len(addresses) == size


def _hvd_client(host: str, port: int, secret: bytes, rank: int, size: int) -> None:
    from selector_backend.jobs.rendezvous import StoreClient

    client = StoreClient(host, port, secret, timeout=120.0)
    try:
        _init_pattern(rank, size, client.gather)
    finally:
        client.close()


def _torch_client(host: str, port: int, secret: bytes, rank: int, size: int) -> None:
    from torch.distributed import TCPStore

    store = TCPStore(host, port, size, False, timeout=timedelta(seconds=120))

    def gather(prefix: str, rank: int, size: int, value: bytes) -> list[bytes]:
        store.set(f"{prefix}{rank}", value)
        return list(store.multi_get([f"{prefix}{r}" for r in range(size)]))

    _init_pattern(rank, size, gather)


def _start_together(procs: list[Any], ready: Any, go: Any) -> float:
    """Start ``procs``, wait until each has reached ``ready`` (a barrier of len(procs) + 1 parties)
    and give the go signal; its time. Each process then waits on ``go`` (an event), so forking
    them, however many, is not part of the time and none starts before it."""
    for proc in procs:
        proc.start()
    ready.wait()
    start = time.monotonic()
    go.set()
    return start


def _worker(
    kind: str, host: str, port: int, secret: bytes, ranks: list[int], size: int, ready: Any, go: Any, out: Any
) -> None:
    """One forked process: a thread per simulated rank, started together at the go signal."""
    client = _hvd_client if kind == "hvd_selector" else _torch_client
    errors: list[str] = []

    def one(rank: int) -> None:
        try:
            client(host, port, secret, rank, size)
        except Exception as exc:  # reported to the parent
            errors.append(f"rank {rank}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    ready.wait()
    go.wait()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put((time.monotonic(), errors))


def _store_round(kind: str, size: int, workers: int) -> float:
    """Seconds for ``size`` simulated ranks to rendezvous through one store of ``kind``."""
    import multiprocessing as mp
    import secrets

    ctx = mp.get_context("fork")
    secret = secrets.token_bytes(32)
    server: Any
    if kind == "hvd_selector":
        from selector_backend.jobs.rendezvous import StoreServer

        server = StoreServer(secret, clients=size).start()
        host, port = server.address
    else:
        from torch.distributed import TCPStore

        server = TCPStore("127.0.0.1", 0, size, True, timeout=timedelta(seconds=120), wait_for_workers=False)
        host, port = "127.0.0.1", server.port
    groups = [list(range(size))[w::workers] for w in range(min(workers, size))]
    ready, go, out = ctx.Barrier(len(groups) + 1, timeout=120), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, host, port, secret, g, size, ready, go, out)) for g in groups]
    start = _start_together(procs, ready, go)
    finished, errors = [], []
    for _ in procs:
        at, errs = out.get(timeout=600)
        finished.append(at)
        errors.extend(errs)
    for proc in procs:
        proc.join()
    if kind == "hvd_selector":
        server.stop()
    else:
        del server
    if errors:
        raise RuntimeError(f"{kind} at {size} ranks: {errors[:3]}")
    return max(finished) - start


# ------------------------------------------------------------ full init()
def _init_child(size: int, rounds: int) -> dict[str, Any]:
    """Runs in the gloo build's environment: median-of-rounds init() time for both libraries at ``size`` ranks."""
    import multiprocessing as mp
    import secrets
    import socket

    import torch.distributed as dist

    import hvd_selector as hvd
    from hvd_selector import buildmix
    from selector_backend.jobs.rendezvous import StoreServer

    ctx = mp.get_context("fork")
    # Read once before forking, like the imports: an installed wheel reads its release from the dist-info
    # beside the package in well under a millisecond; this staged build has none, and each forked rank
    # would otherwise scan sys.path with importlib.metadata (about 12 ms of CPU).
    buildmix.release()

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def timed(module: Any, name: str, phases: dict[str, float]) -> None:
        """Wrap module.name so its seconds add up in phases[name] (the init() phases of one rank)."""
        inner = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return inner(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.monotonic() - start

        setattr(module, name, wrapper)

    def hvd_rank(rank: int, port: int, secret: bytes, ready: Any, go: Any, out: Any) -> None:
        from hvd_selector import _api, _core, buildmix

        phases: dict[str, float] = {}
        timed(_api, "StoreClient", phases)  # connect + handshake
        timed(buildmix, "exchange", phases)  # the build exchange through the store
        timed(_core, "init_gloo", phases)  # the core: mesh addresses through the store, TCP connects, shm
        os.environ.update(
            HVD_SELECTOR_RENDEZVOUS=f"127.0.0.1:{port}",
            HVD_SELECTOR_SECRET=secret.hex(),
            HVD_SELECTOR_RANK=str(rank),
            HVD_SELECTOR_SIZE=str(size),
            HVD_SELECTOR_LOCAL_RANK=str(rank),
            HVD_SELECTOR_LOCAL_SIZE=str(size),
            HVD_SELECTOR_TIMEOUT="120",
        )
        ready.wait()
        go.wait()
        cpu = time.process_time()
        hvd.init()
        out.put((time.monotonic(), phases, time.process_time() - cpu))
        hvd.shutdown()

    def torch_rank(rank: int, port: int, secret: bytes, ready: Any, go: Any, out: Any) -> None:
        ready.wait()
        go.wait()
        cpu = time.process_time()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
        out.put((time.monotonic(), {}, time.process_time() - cpu))
        dist.destroy_process_group()

    def one(kind: str) -> tuple[float, dict[str, float], float]:
        """Seconds to the last rank's return, the slowest rank's phases, and the CPU seconds of every
        rank plus this process (which serves hvd_selector's store; torch's runs in rank 0)."""
        secret = secrets.token_bytes(32)
        server = StoreServer(secret, clients=size) if kind == "hvd_selector" else None
        port = server.address[1] if server is not None else free_port()
        ready, go, out = ctx.Barrier(size + 1, timeout=INIT_BOUND), ctx.Event(), ctx.Queue()
        target = hvd_rank if kind == "hvd_selector" else torch_rank
        procs = [ctx.Process(target=target, args=(r, port, secret, ready, go, out)) for r in range(size)]
        if server is not None:
            server.start()
        try:
            start = _start_together(procs, ready, go)
            own_cpu = time.process_time()  # serving the store from the go signal on, not forking the ranks
            done = [out.get(timeout=INIT_BOUND) for _ in procs]
            own_cpu = time.process_time() - own_cpu
        except (threading.BrokenBarrierError, queue.Empty):  # a rank died or hung: record it, end the round
            done = []
        for proc in procs:
            proc.join(timeout=10 if done else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        if server is not None:
            server.stop()
        if not done or any(proc.exitcode for proc in procs):
            codes = sorted({proc.exitcode for proc in procs})
            print(
                f"{kind} at {size} ranks: not every rank was done within {INIT_BOUND}s (exit codes {codes})",
                file=sys.stderr,
            )
            return float("inf"), {}, float("inf")
        slowest = {name: max(p.get(name, 0.0) for _, p, _ in done) for name in done[0][1]}
        return max(at for at, _, _ in done) - start, slowest, own_cpu + sum(cpu for _, _, cpu in done)

    seen: dict[str, list[tuple[float, dict[str, float], float]]] = {"hvd_selector": [], "torch": []}
    for _ in range(rounds):
        for kind in seen:
            seen[kind].append(one(kind))
    middle = {kind: sorted(runs, key=lambda run: run[0])[(len(runs) - 1) // 2] for kind, runs in seen.items()}
    return {
        **{kind: run[0] for kind, run in middle.items()},
        "rounds_s": {kind: [round(run[0], 4) for run in runs] for kind, runs in seen.items()},
        "cpu_s": {kind: round(_median([run[2] for run in runs]), 4) for kind, runs in seen.items()},
        "hvd_selector_phases_s": {k: round(v, 4) for k, v in middle["hvd_selector"][1].items()},
    }


def _full_init(counts: list[int], rounds: int) -> list[dict[str, Any]]:
    from devtools import native_builds

    build = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO)
    rows = []
    for size in counts:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_init", "--init-child", str(size), "--rounds", str(rounds)],
            cwd="/",
            env=build.env(PYTHONPATH=os.pathsep.join([str(build.stage), str(REPO)])),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if proc.returncode:
            raise RuntimeError(f"full init at {size} ranks failed:\n{proc.stderr[-3000:]}")
        median = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(
            {
                **_row(size, median),
                "rounds_s": median["rounds_s"],
                "cpu_s": median["cpu_s"],
                "hvd_selector_phases_s": median["hvd_selector_phases_s"],
            }
        )
        print(
            _line("init()", rows[-1]),
            "CPU s (all ranks + store):",
            rows[-1]["cpu_s"],
            "slowest rank's phases:",
            rows[-1]["hvd_selector_phases_s"],
            flush=True,
        )
    return rows


def _median(values: list[float]) -> float:
    """The middle value (the lower middle of an even count: a round that hung stays out of it while it can)."""
    return sorted(values)[(len(values) - 1) // 2]


def _row(size: int, median: dict[str, Any]) -> dict[str, Any]:
    """Seconds of both sides and their ratio; None where a side never finished (a hang, see stderr)."""
    hvd, torch = median["hvd_selector"], median["torch"]
    finite = hvd != float("inf") and torch != float("inf")
    return {
        "ranks": size,
        "hvd_selector_s": round(hvd, 4) if hvd != float("inf") else None,
        "torch_s": round(torch, 4) if torch != float("inf") else None,
        "ratio": round(hvd / torch, 3) if finite else None,
    }


def _line(what: str, row: dict[str, Any]) -> str:
    return (
        f"{what:>10} {row['ranks']:>4} ranks: hvd_selector {row['hvd_selector_s']} s, "
        f"torch {row['torch_s']} s, ratio {row['ratio']}"
    )


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _without_dns(argv: list[str]) -> None:
    """Re-run this benchmark in a private mount namespace whose resolv.conf names no server.

    torch's TCPStore server looks up each client's host name; with an
    unreachable nameserver (this machine's) concurrent connects stalled about
    10 s in that lookup, which is not what the store costs. Our store does no
    lookups. Root only; --keep-dns measures with the host's resolver.
    """
    empty = Path(tempfile.mkdtemp(prefix="bench-init-")) / "resolv.conf"
    empty.write_text("options timeout:1 attempts:1\n")
    script = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    cmd = ["unshare", "-m", "sh", "-c", script, str(empty), sys.executable, "-m", "benchmarks.bench_init", *argv]
    env = {**os.environ, NO_DNS_ENV: "1"}
    sys.exit(subprocess.run(cmd, env=env, cwd=REPO).returncode)


NO_DNS_ENV = "BENCH_INIT_NO_DNS"
INIT_BOUND = 120  # seconds a full-init round may take before it is recorded as not finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="16,64,256", help="store rendezvous rank counts (simulated clients)")
    parser.add_argument("--init-ranks", default="4,8,16", help="full init() rank counts (real processes); '' skips")
    parser.add_argument(
        "--workers", type=int, default=0, help="processes the simulated clients are spread over (0: one per rank)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per count; the median is kept")
    parser.add_argument("--write", type=Path, help="also write the result (JSON) to this file")
    parser.add_argument("--keep-dns", action="store_true", help="measure with the host's resolver (see below)")
    parser.add_argument("--init-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    no_dns = os.environ.get(NO_DNS_ENV) == "1"
    if not (args.init_child or args.keep_dns or no_dns) and os.geteuid() == 0 and shutil.which("unshare"):
        _without_dns(sys.argv[1:])
    if args.init_child:
        print(json.dumps(_init_child(args.init_child, args.rounds)))
        return
    load_before = _uptime()
    print("load before:", load_before, flush=True)
    store_rows = []
    for size in _counts(args.ranks):
        seen: dict[str, list[float]] = {"hvd_selector": [], "torch": []}
        for _ in range(args.rounds):
            for kind in seen:
                seen[kind].append(_store_round(kind, size, args.workers or size))
        store_rows.append(
            {
                **_row(size, {kind: _median(runs) for kind, runs in seen.items()}),
                "rounds_s": {kind: [round(s, 4) for s in runs] for kind, runs in seen.items()},
            }
        )
        print(_line("store", store_rows[-1]), flush=True)
    init_rows = _full_init(_counts(args.init_ranks), args.rounds) if args.init_ranks.strip() else []
    import torch

    result = {
        "what": "rendezvous through the store (simulated ranks: client threads in --workers forked processes, "
        "0: one each) and full init() (real processes), hvd_selector vs torch.distributed; seconds, "
        "median of interleaved rounds; ratio = hvd/torch",
        "command": "python -m benchmarks.bench_init " + " ".join(sys.argv[1:]),
        "workers": args.workers,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "uptime_before": load_before,
        "uptime_after": _uptime(),
        "cpus": os.cpu_count(),
        "resolver": "none (private mount namespace)" if no_dns else "the host's",
        "store": store_rows,
        "init": init_rows,
    }
    print("load after:", result["uptime_after"])
    text = json.dumps(result, indent=2) + "\n"
    if args.write is None:
        print(text, end="")
        return
    args.write.parent.mkdir(parents=True, exist_ok=True)
    args.write.write_text(text)
    print(f"wrote {args.write}")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
