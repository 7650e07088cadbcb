"""A training step users recognise: hvd.DistributedOptimizer vs PyTorch DDP (gloo), 2 ranks on CPU.

The same small CNN (examples/pytorch_mnist.py's Net, 2 convolutions and 2
linear layers, 20.5k parameters at --width 1) trains on the same
synthetic batch of 32 images per rank, one torch thread per rank:
  * ``hvd``: ``hvd-selector run -np 2``, SGD wrapped in hvd.DistributedOptimizer
    (gradients allreduced by the engine as backward produces them);
  * ``ddp``: ``torchrun --nproc-per-node 2``, the model wrapped in
    torch.nn.parallel.DistributedDataParallel over the gloo process group.
Each job warms up, then times --steps steps (zero_grad, forward, loss,
backward, step) between two barriers, --rounds times; a job's rate is
its best round's steps/s on rank 0. Jobs alternate (hvd, ddp, hvd, ddp) with
the load average before and after each; the ratio is hvd over ddp of the
best rates. The hvd worker also times backward+step apart from forward and
the optimizer's synchronize() (where its time goes). Writes
benchmarks/results/ddp.json. Not a test; run from the repository root:

    python -m benchmarks.bench_ddp [--steps 200] [--rounds 3] [--width 1]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BATCH = 32


def _model(width: int) -> Any:
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):  # examples/pytorch_mnist.py's Net, channels times `width`
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8 * width, kernel_size=5)
            self.conv2 = nn.Conv2d(8 * width, 16 * width, kernel_size=5)
            self.fc1 = nn.Linear(256 * width, 64 * width)
            self.fc2 = nn.Linear(64 * width, 10)

        def forward(self, x: Any) -> Any:
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2))
            x = F.relu(self.fc1(x.flatten(1)))
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def _train(step: Any, barrier: Any, steps: int, rounds: int) -> float:
    """Best steps/s over `rounds` timed runs of `steps` steps (after a warm-up)."""
    for _ in range(10):
        step()
    best = 0.0
    for _ in range(rounds):
        barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        barrier()
        best = max(best, steps / (time.perf_counter() - start))
    return best


def hvd_worker(out: Path, steps: int, rounds: int, width: int) -> None:
    import torch
    import torch.nn.functional as F

    import hvd_selector.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    model = _model(width)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5), named_parameters=model.named_parameters()
    )
    images, labels = torch.rand(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))
    split = {"forward": 0.0, "backward": 0.0, "synchronize": 0.0, "step": 0.0}

    def step() -> None:
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        t1 = time.perf_counter()
        loss.backward()  # the hooks start the allreduces
        t2 = time.perf_counter()
        optimizer.synchronize()
        t3 = time.perf_counter()
        with optimizer.skip_synchronize():
            optimizer.step()
        t4 = time.perf_counter()
        for key, seconds in zip(split, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            split[key] += seconds

    rate = _train(step, hvd.barrier, steps, rounds)
    if hvd.rank() == 0:
        total = sum(split.values())
        out.write_text(json.dumps({"steps_per_s": rate, "split": {k: v / total for k, v in split.items()}}))
    hvd.shutdown()


def ddp_worker(out: Path, steps: int, rounds: int, width: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(_model(width))  # broadcasts rank 0's parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    images, labels = torch.rand(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))

    def step() -> None:
        optimizer.zero_grad()
        F.nll_loss(model(images), labels).backward()  # DDP's hooks allreduce its buckets
        optimizer.step()

    rate = _train(step, dist.barrier, steps, rounds)
    if dist.get_rank() == 0:
        out.write_text(json.dumps({"steps_per_s": rate}))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(kind: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any] | None:
    from devtools import native_builds

    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_ddp.{kind}.{os.getpid()}.json"
    worker = [f"--{kind}-worker", str(out), "--steps", str(args.steps), "--rounds", str(args.rounds)]
    worker += ["--width", str(args.width)]
    if kind == "hvd":
        argv = native_builds.run_argv(2, Path(__file__), *worker)
    else:
        port = str(_free_port())
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", port]
        argv = [*torchrun, str(Path(__file__)), *worker]
    RESULTS.mkdir(exist_ok=True)  # the cwd, not the repository: the launcher must import the built hvd_selector
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, cwd=RESULTS)
    if proc.returncode or not out.exists():
        print(proc.stdout[-3000:] + proc.stderr[-3000:])
        return None
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=1, help="channels and hidden units times this")
    parser.add_argument("--hvd-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hvd_worker:
        hvd_worker(args.hvd_worker, args.steps, args.rounds, args.width)
        return 0
    if args.ddp_worker:
        ddp_worker(args.ddp_worker, args.steps, args.rounds, args.width)
        return 0
    from devtools import native_builds

    env = native_builds.build_variant("gloo-x86_64_v3", native_builds.GLOO).env()
    params = sum(p.numel() for p in _model(args.width).parameters())
    record: dict[str, Any] = {"steps": args.steps, "batch_per_rank": BATCH, "parameters": params, "runs": []}
    for _ in range(2):  # alternate, twice: a change in the machine's load shows as a spread
        for kind in ("hvd", "ddp"):
            load_before = os.getloadavg()
            result = _job(kind, env, args)
            if result is None:
                return 4
            run = {"code": kind, **result, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
    best = {kind: max(r["steps_per_s"] for r in record["runs"] if r["code"] == kind) for kind in ("hvd", "ddp")}
    record["best_steps_per_s"] = best
    record["ratio_hvd_over_ddp"] = best["hvd"] / best["ddp"]
    print(f"hvd {best['hvd']:.1f} steps/s, ddp {best['ddp']:.1f} steps/s: {record['ratio_hvd_over_ddp']:.2f}x DDP")
    RESULTS.mkdir(exist_ok=True)
    name = "ddp.json" if args.width == 1 else f"ddp.width{args.width}.json"
    (RESULTS / name).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
