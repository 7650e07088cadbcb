"""A rank for the init()-time job checks: python job_checks.py OUT_DIR MODE [NAME=VALUE].

Each rank writes OUT_DIR/rank<r>.json: the exception init() (or the step after it) raised, or "ok".

- ``drift NAME=VALUE``: rank 1 alone sets NAME=VALUE (before the core loads), then init() and an allreduce;
- ``split``: init() under a launcher the build's MPI cannot see (torchrun, the other MPI's mpiexec);
- ``reinit``: init(), allreduce, shutdown() three times (MPI builds);
- ``finalized``: mpi4py initialises and finalises MPI, then init();
- ``forged``: (Open MPI build, 2 ranks) rank 1 is not hvd_selector but mpi4py: it answers rank 0's
  init() collectives, then sends a settings record whose text has no end, or an agreement
  summary that differs followed by a descriptor whose ndim and shape are huge; rank 0 must fail
  with one line, not crash.
"""

import json
import os
import struct
import sys
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
rank = int(
    next(
        os.environ[k]
        for k in ("HVD_SELECTOR_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID")
        if k in os.environ
    )
)
outcome: dict[str, object] = {"rank": rank}


def record(fn) -> None:
    try:
        outcome["result"] = fn()
    except Exception as exc:  # the point: which exception, with what text
        outcome.update(error=type(exc).__name__, message=str(exc))
    (out / f"rank{rank}.json").write_text(json.dumps(outcome))


if mode == "drift":
    name, value = sys.argv[3].split("=", 1)
    if rank == 1:
        os.environ[name] = value

if mode.startswith("forged") and rank == 1:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()  # pairs with rank 0's MPI_Comm_dup in init()
    comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)  # pairs with its communicator of this host

    def allgather(mine: bytes) -> None:
        every = bytearray(len(mine) * comm.Get_size())
        comm.Allgather([mine, MPI.BYTE], [every, MPI.BYTE])

    settings = struct.pack("<IiQQ", 0x48565331, 0, 1 << 20, 64 << 20)  # as rank 0's: shm off, defaults
    text = b"A" * 240 if mode == "forged_settings" else b""  # no NUL anywhere: its end must be found
    allgather(settings + text.ljust(240, b"\0"))
    if mode == "forged_descriptor":  # rank 0's first allreduce: a summary that differs, then a descriptor
        huge = 1 << 62
        allgather(struct.pack("<Qq", 1, huge))  # the compact round: {digest, shape[0]}
        descriptor = struct.pack("<IIiiiiii8qQ", 0x48564431, 1, 3, 1, -1, 1 << 30, 0, 0, *[huge] * 8, 0)
        allgather(descriptor)
    sys.exit(0)

import numpy as np  # noqa: E402

import hvd_selector as hvd  # noqa: E402

if mode == "drift" or mode.startswith("forged"):
    record(lambda: (hvd.init(), hvd.allreduce(np.ones(4)).tolist())[1])
elif mode == "split":
    record(lambda: (hvd.init(), hvd.size())[1])
elif mode == "reinit":

    def rounds() -> list[float]:
        sums = []
        for _ in range(3):
            hvd.init()
            sums.append(float(hvd.allreduce(np.ones(2), op=hvd.Sum)[0]))
            hvd.shutdown()
        return sums

    record(rounds)
elif mode == "finalized":
    from mpi4py import MPI

    MPI.Finalize()
    record(hvd.init)
