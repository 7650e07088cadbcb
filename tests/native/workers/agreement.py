"""The agreement round over the network (state.h, agree()): what it costs on
the wire and what it says when ranks differ.

Run under the launcher with HVD_SELECTOR_SHM=0: python agreement.py OUT_DIR.
Writes OUT_DIR/rank<r>.json: the TCP payload bytes this rank sent per tiny
broadcast (from `ss`, the kernel's count for this process's sockets), the
TCP segments carrying data it sent per 4 KiB allreduce, allgather and
broadcast (each message is one segment on loopback: the number of messages,
that is of rounds, since a rank sends one message a round), and
the MismatchError texts of collectives whose ranks disagree (root, op, a
shape beyond the first dimension of an allgather).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from hvd_selector._api import _core

out_dir = Path(sys.argv[1])
CALLS = 200


def bytes_sent(field: str = "bytes_sent") -> int:
    """Bytes (or data segments: ``data_segs_out``) this process has sent on its established TCP sockets."""
    text = subprocess.run(
        ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    total, mine = 0, False
    for line in text.splitlines():
        if not line.startswith(("\t", " ")):  # a socket's line; its details follow, indented
            mine = f"pid={os.getpid()}," in line
        elif mine and (m := re.search(rf"\b{field}:(\d+)", line)):
            total += int(m.group(1))
    return total


hvd.init()
rank, size = hvd.rank(), hvd.size()
tiny = np.ones(1, dtype=np.float32)
_core.broadcast(tiny, 0)  # every connection made, buffers sized
hvd.barrier()
before = bytes_sent()
for _ in range(CALLS):
    _core.broadcast(tiny, 0)
per_call = (bytes_sent() - before) / CALLS
hvd.barrier()

small = np.ones(1024, dtype=np.float32)  # 4 KiB (a piece of 4 KiB per rank for allgather)
segments: dict[str, float] = {}
for name, call in [
    ("allreduce", lambda: hvd.allreduce(small, op=hvd.Sum)),
    ("allgather", lambda: hvd.allgather(small)),
    ("broadcast", lambda: hvd.broadcast(small, 0)),
]:
    call()
    hvd.barrier()
    before = bytes_sent("data_segs_out")
    for _ in range(CALLS):
        call()
    segments[name] = (bytes_sent("data_segs_out") - before) / CALLS
    hvd.barrier()

errors: dict[str, str] = {}


def expect_mismatch(name: str, call) -> None:
    try:
        call()
        errors[name] = "no error"
    except hvd.MismatchError as exc:
        errors[name] = str(exc)


expect_mismatch("root", lambda: _core.broadcast(tiny, 1 if rank == size - 1 else 0))
expect_mismatch("op", lambda: hvd.allreduce(np.ones(3), op=hvd.Max if rank == 1 else hvd.Sum))
expect_mismatch("row", lambda: hvd.allgather(np.ones((rank + 1, 3 if rank == 0 else 2))))
gathered = hvd.allgather(np.full((rank + 1, 2), rank))  # first dimensions may differ: no error
ok = gathered.shape == (size * (size + 1) // 2, 2) and int(gathered[-1, 0]) == size - 1
(out_dir / f"rank{rank}.json").write_text(
    json.dumps({"per_call": per_call, "segments": segments, "errors": errors, "ragged_ok": ok})
)
hvd.shutdown()
