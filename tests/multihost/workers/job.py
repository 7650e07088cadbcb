"""A multi-host rank: python job.py OUT_DIR MODE.

MODE "reduce": every numpy dtype and op ("reduce16" adds bfloat16 through torch) on random data
whose float16/bfloat16 sums round, saved raw to OUT_DIR/rank<r>.bin for a
bitwise comparison; also records identity and whether the job secret shows in
any process's command line. MODE "hang": init, write pid, then allreduce in
a loop until a peer dies; records the error and how long the failing call took.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd

out_dir, mode = Path(sys.argv[1]), sys.argv[2]
start = time.monotonic()
try:
    hvd.init()
except Exception as exc:  # the point: the one-line error a rank gets
    rank = os.environ.get("HVD_SELECTOR_RANK") or os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    (out_dir / f"init-error{rank}.txt").write_text(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
rank, size = hvd.rank(), hvd.size()
info = {
    "rank": rank,
    "size": size,
    "local_rank": hvd.local_rank(),
    "local_size": hvd.local_size(),
    "target": hvd.build_info()["target"],
    "kernels": hvd.build_info()["kernels"],
}


def secret_in_ps() -> bool:
    secret = os.environ.get("HVD_SELECTOR_SECRET", "")
    if not secret:
        return False
    for proc in Path("/proc").iterdir():
        try:
            if secret.encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


if mode in ("reduce", "reduce16"):
    rng = np.random.default_rng(1234 + rank)
    n = 1000 + 13  # not a multiple of any vector width: the scalar tails run too
    chunks = []
    for dtype in ("float16", "float32", "float64", "int32", "int64"):
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            x = (rng.standard_normal(n) * 3).astype(dtype) if "float" in dtype else rng.integers(-9, 9, n).astype(dtype)
            chunks.append(hvd.allreduce(x, op=op).tobytes())
        chunks.append(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.3, postscale_factor=1.7).tobytes())
    for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product) if mode == "reduce16" else ():
        import torch  # bfloat16 (numpy has none); only where asked: importing torch is slow

        t = torch.from_numpy(rng.standard_normal(n).astype(np.float32) * 3).to(torch.bfloat16)
        chunks.append(hvd.allreduce(t, op=op).view(torch.int16).numpy().tobytes())
    chunks.append(hvd.allgather(np.full((rank + 1, 2), rank, np.float32)).tobytes())
    (out_dir / f"rank{rank}.bin").write_bytes(b"".join(chunks))
    info["secret_in_ps"] = secret_in_ps()
    from hvd_selector import buildmix

    info["mix"] = buildmix.format_mix(hvd._api.job_builds())
    (out_dir / f"rank{rank}.json").write_text(json.dumps(info))
elif mode == "hang":
    (out_dir / f"pid{rank}").write_text(str(os.getpid()))
    x = np.ones(1 << 16, np.float32)
    deadline = time.monotonic() + 120  # bounded: the test kills a peer long before
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            hvd.allreduce(x)
        except Exception as exc:
            info.update(error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0)
            break
        time.sleep(0.01)
    (out_dir / f"rank{rank}.json").write_text(json.dumps(info))
    sys.exit(1 if "error" in info else 0)
