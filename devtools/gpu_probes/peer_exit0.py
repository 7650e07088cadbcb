"""Rank 1 leaves right after init() with exit code 0, which the launcher lets the job outlive;
rank 0's next op (MODE gpu or cpu) must raise PeerFailureError and shut down cleanly.

    hvd-selector run --timeout 20 -np 2 python peer_exit0.py gpu
"""

import os
import sys
import time

import torch

import hvd_selector.torch as hvd

mode = sys.argv[1]
hvd.init()
if hvd.rank() == 1:
    print("[rank 1] exiting 0 after init", flush=True)
    os._exit(0)
time.sleep(1)
start = time.time()
try:
    if mode == "gpu":
        torch.cuda.set_device(0)
        got = hvd.allgather(torch.ones(2, device="cuda")).cpu().tolist()
    else:
        got = hvd.allreduce(torch.ones(2)).tolist()
    print(f"[rank 0] {mode} op returned {got}", flush=True)
except Exception as exc:
    print(f"[rank 0] {mode} op: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
print(f"[rank 0] took {time.time() - start:.2f}s", flush=True)
hvd.shutdown()
print("[rank 0] clean exit", flush=True)
