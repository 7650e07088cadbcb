"""Every op and dtype on every rank; results saved for the test to compare.

Run under the launcher: python collectives.py OUT_DIR [HOSTS [numpy]]. Writes
OUT_DIR/rank<r>.npz (bfloat16 results saved as float32) and types.json. With
"numpy" the torch tensors are left out (importing torch costs every rank about
2.5 s of CPU).
"""

import json
import sys
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from tests.native import cases

out_dir = Path(sys.argv[1])
hosts = int(sys.argv[2]) if len(sys.argv) > 2 else 1
with_torch = sys.argv[3:] != ["numpy"]
if hosts > 1:  # pretend ranks run on `hosts` machines (consecutive rank blocks)
    import os

    def first(*names: str) -> int:
        return int(next(os.environ[n] for n in names if n in os.environ))

    rank_ = first("HVD_SELECTOR_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")
    size_ = first("HVD_SELECTOR_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
    os.environ["HVD_SELECTOR_HOST_ID"] = f"host{rank_ * hosts // size_}"
hvd.init()
(out_dir / f"transport{hvd.rank()}.txt").write_text(hvd.build_info()["transport"])
rank, size = hvd.rank(), hvd.size()
assert hvd.local_rank() == rank and hvd.local_size() == size
saved: dict[str, np.ndarray] = {}
types: dict[str, str] = {}

for dtype in cases.NUMPY_DTYPES:
    for op_name, op in cases.OPS.items():
        for pre, post in cases.SCALES:
            x = cases.cast(cases.values(rank), dtype)
            saved[f"allreduce/{dtype}/{op_name}/{pre}/{post}"] = hvd.allreduce(
                x, op=op, prescale_factor=pre, postscale_factor=post
            )
    saved[f"allgather/{dtype}"] = hvd.allgather(cases.cast(cases.gather_rows(rank), dtype))
    mine = cases.cast(cases.gather_rows(size - 1) if rank == size - 1 else np.zeros((size, 3)), dtype)
    saved[f"broadcast/{dtype}"] = hvd.broadcast(mine, root_rank=size - 1)
    a2a = cases.cast(cases.alltoall_input(rank, size), dtype)
    saved[f"alltoall/{dtype}"] = hvd.alltoall(a2a, splits=cases.alltoall_splits(rank, size))

# Beyond the agreement round's inline payload and (with a small
# HVD_SELECTOR_SHM_SLOT) over several shared-memory chunks.
for dtype in cases.NUMPY_DTYPES:
    for op_name, op in cases.OPS.items():
        x = cases.cast(cases.values(rank, cases.BIG), dtype)
        saved[f"allreduce_big/{dtype}/{op_name}"] = hvd.allreduce(x, op=op)
    saved[f"allgather_big/{dtype}"] = hvd.allgather(cases.cast(cases.big_rows(rank), dtype))
    mine = cases.big_rows(size - 1) if rank == size - 1 else np.zeros_like(cases.big_rows(size - 1))
    saved[f"broadcast_big/{dtype}"] = hvd.broadcast(cases.cast(mine, dtype), root_rank=size - 1)
big_inplace = cases.cast(cases.values(rank, cases.BIG), "float32")
hvd.allreduce_(big_inplace, op=hvd.Sum)
saved["allreduce_big_/float32/Sum"] = big_inplace

inplace = cases.cast(cases.values(rank), "float32")
same = hvd.allreduce_(inplace, op=hvd.Sum)
assert same is inplace
saved["allreduce_/float32/Sum"] = inplace
even = hvd.alltoall(np.arange(size * 2, dtype=np.int32) + 10 * rank)
saved["alltoall_even"] = even

for threshold in (hvd.fusion_threshold(), 256):
    hvd.set_fusion_threshold(threshold)
    for op_name in ("Sum", "Average"):
        shapes = cases.group_shapes()
        ins = [cases.group_input(rank, i, s, d) for i, (s, d) in enumerate(shapes)]
        outs = hvd.grouped_allreduce(ins, op=cases.OPS[op_name])
        for i, o in enumerate(outs):
            saved[f"grouped/{threshold == 256}/{op_name}/{i}"] = o
        # One dtype (the numpy fast path: results are views of one flat array).
        outs = hvd.grouped_allreduce(tuple(ins[:21]), op=cases.OPS[op_name])
        for i, o in enumerate(outs):
            saved[f"grouped1/{threshold == 256}/{op_name}/{i}"] = o
hvd.barrier()

if with_torch:
    import torch

    for dtype in cases.TORCH_DTYPES:
        tdt = getattr(torch, dtype)
        for op_name, op in cases.OPS.items():
            x = torch.tensor(cases.values(rank), dtype=tdt)
            res = hvd.allreduce(x, op=op)
            types[f"torch/allreduce/{dtype}/{op_name}"] = f"{type(res).__module__}.{type(res).__name__}:{res.dtype}"
            saved[f"torch/allreduce/{dtype}/{op_name}"] = res.float().numpy() if dtype == "bfloat16" else res.numpy()
        g = hvd.allgather(torch.tensor(cases.gather_rows(rank), dtype=tdt))
        types[f"torch/allgather/{dtype}"] = f"{type(g).__module__}.{type(g).__name__}:{g.dtype}"
        saved[f"torch/allgather/{dtype}"] = g.float().numpy()

np.savez(out_dir / f"rank{rank}.npz", **{k.replace("/", "|"): v for k, v in saved.items()})
(out_dir / f"types{rank}.json").write_text(json.dumps(types))
hvd.shutdown()
