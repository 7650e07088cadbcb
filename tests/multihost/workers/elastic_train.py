"""An elastic training loop: python elastic_train.py OUT_DIR STEPS [PAUSE].

Each step allreduces a value whose exact sum depends on the step and the job's
size (a rank holding a stale tensor, or a mesh mixing two generations, gives
another number: the worker then exits 5), and moves a weight by a rule that does
not depend on the size, so the loss at step k is the same in every generation.
Every step appends one JSON line to OUT_DIR/log-<worker>.jsonl; the state is
committed every COMMIT_EVERY steps.
"""

import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import hvd_selector as hvd
from hvd_selector import elastic

COMMIT_EVERY = 5
faulthandler.register(signal.SIGUSR1)
out_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
log = open(out_dir / f"log-{os.environ['HVD_SELECTOR_WORKER']}.jsonl", "a", buffering=1)  # noqa: SIM115
log.write(json.dumps({"pid": os.getpid()}) + "\n")
hvd.init()
state = elastic.ObjectState(step=0, weight=0.0, commits=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


@elastic.run
def train(state: elastic.ObjectState) -> None:
    while state.step < steps:
        size, rank = hvd.size(), hvd.rank()
        got = hvd.allreduce(np.full(3, rank + 1 + 1000.0 * state.step), op=hvd.Sum, name="check")
        want = size * (size + 1) / 2 + 1000.0 * state.step * size
        if not np.array_equal(got, np.full(3, want)):
            log.write(json.dumps({"stale": got.tolist(), "want": want, "step": state.step, "size": size}) + "\n")
            sys.exit(5)
        grad = hvd.allreduce(np.array([1.0 - state.weight]), op=hvd.Average, name="grad")
        state.weight += 0.1 * float(grad[0])
        state.step += 1
        loss = (1.0 - state.weight) ** 2
        record = {"step": state.step, "size": size, "rank": rank, "loss": loss, "commits": state.commits}
        log.write(json.dumps(record) + "\n")
        if state.step % COMMIT_EVERY == 0:
            state.commits += 1
            state.commit()
        time.sleep(pause)


train(state)
log.write(json.dumps({"done": state.step, "size": hvd.size(), "rank": hvd.rank(), "resets": resets}) + "\n")
