"""Two torch ranks drifting apart (docs/guide/pytorch.md, "Ranks that drift apart").

Run under the launcher with HVD_SELECTOR_TIMEOUT=2: python torch_drift.py OUT_DIR SECONDS.
Rank 1 computes alone for SECONDS before its allreduce while rank 0 already
waits in its own; OUT_DIR/rank<r>.json says what each rank saw: "ok", or the
error type and message, for that allreduce and for the next one; then both
ranks shutdown() and init() again (with a 30 s timeout, docs/guide/pytorch.md) and
record whether an allreduce works.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

import hvd_selector.torch as hvd

out_dir, drift = Path(sys.argv[1]), float(sys.argv[2])
hvd.init()
rank, size = hvd.rank(), hvd.size()
seen: dict[str, str] = {}
hvd.barrier()  # both threads idle, nothing outstanding: rank 0's next allreduce starts a round alone


def attempt(key: str, name: str) -> None:
    try:
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum, name=name).item()
        seen[key] = "ok" if got == size else f"wrong sum {got}"
    except Exception as exc:  # what a training script would see
        seen[key] = f"{type(exc).__name__}: {exc}"


if rank == 1:
    time.sleep(drift)  # computing alone (an evaluation, a checkpoint) while rank 0 waits
attempt("drifted", "drifted")
attempt("next", "next")
hvd.shutdown()
# The ranks reach this init() as far apart as they drifted (rank 0 at about 2 s, rank 1 after 3.5 s),
# and init() waits for its peers HVD_SELECTOR_TIMEOUT seconds too: 2 s would leave a 0.5 s margin.
os.environ["HVD_SELECTOR_TIMEOUT"] = "30"
hvd.init()
attempt("after_reinit", "after_reinit")
hvd.shutdown()
(out_dir / f"rank{rank}.json").write_text(json.dumps(seen))
