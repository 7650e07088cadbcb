"""hvd.SyncBatchNorm on N ranks against one torch BatchNorm over the whole batch.

Run under the launcher: python sync_batch_norm.py OUT_DIR. Every rank builds
the same global batches (seeded) and takes its own rows (rank r gets r + 2
rows: batch sizes differ); a second copy of the layer is a plain torch
BatchNorm fed the concatenated batch in this process. Per case, for several
training steps: the rank's output rows equal the reference's, its input
gradient rows equal the reference's (loss: sum of output * a fixed random
tensor), the weight/bias gradients summed over ranks equal the reference's,
and the running statistics equal after every step; then in eval mode the
output is the local BatchNorm with those statistics (without running
statistics: still the global batch's). OUT_DIR/rank<r>.json
maps each case to "" or its first failure.
"""

import json
import sys
import traceback
from pathlib import Path

import torch

import hvd_selector.torch as hvd

out_dir = Path(sys.argv[1])
hvd.init()
rank, size = hvd.rank(), hvd.size()
rows = [r + 2 for r in range(size)]
start = sum(rows[:rank])
TOL = {"rtol": 1e-5, "atol": 1e-6}

CASES = {
    "1d features (N, C)": dict(shape=(5,), kwargs={}),
    "2d images (N, C, H, W)": dict(shape=(4, 3, 3), kwargs={}),
    "momentum None (cumulative average)": dict(shape=(3, 2), kwargs={"momentum": None}),
    "affine False": dict(shape=(3, 4), kwargs={"affine": False}),
    "no running statistics": dict(shape=(6,), kwargs={"track_running_stats": False}),
}


def run_case(shape: tuple[int, ...], kwargs: dict) -> None:
    channels = shape[0]
    torch.manual_seed(7)
    sync = hvd.SyncBatchNorm(channels, **kwargs)
    ref = torch.nn.BatchNorm1d(channels, **kwargs) if len(shape) <= 2 else torch.nn.BatchNorm2d(channels, **kwargs)
    if sync.affine:
        with torch.no_grad():
            sync.weight.copy_(torch.rand(channels) + 0.5)
            sync.bias.copy_(torch.rand(channels))
            ref.weight.copy_(sync.weight)
            ref.bias.copy_(sync.bias)
    for step in range(3):
        full = torch.randn(sum(rows), *shape) * (step + 1) + step
        upstream = torch.randn(sum(rows), *shape)
        mine = full[start : start + rows[rank]].clone().requires_grad_()
        whole = full.clone().requires_grad_()
        out = sync(mine)
        want = ref(whole)
        torch.testing.assert_close(out, want[start : start + rows[rank]], **TOL)
        (out * upstream[start : start + rows[rank]]).sum().backward()
        (want * upstream).sum().backward()
        torch.testing.assert_close(mine.grad, whole.grad[start : start + rows[rank]], **TOL)
        if sync.affine:
            for got, expect in ((sync.weight.grad, ref.weight.grad), (sync.bias.grad, ref.bias.grad)):
                torch.testing.assert_close(hvd.allreduce(got, op=hvd.Sum), expect, **TOL)
                got.zero_()
                expect.zero_()
        if sync.track_running_stats:
            torch.testing.assert_close(sync.running_mean, ref.running_mean, **TOL)
            torch.testing.assert_close(sync.running_var, ref.running_var, **TOL)
            assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    sync.eval()
    ref.eval()
    probe = torch.randn(sum(rows), *shape)
    if sync.track_running_stats:  # eval: a local BatchNorm with the running statistics
        mine = probe[start : start + rows[rank]]
        torch.testing.assert_close(sync(mine), ref(mine), **TOL)
    else:  # nothing to run on but the batch: still the global batch's statistics
        torch.testing.assert_close(
            sync(probe[start : start + rows[rank]]), ref(probe)[start : start + rows[rank]], **TOL
        )


results: dict[str, str] = {}
for name, case in CASES.items():
    try:
        run_case(case["shape"], case["kwargs"])
        results[name] = ""
    except Exception:
        results[name] = traceback.format_exc()[-1500:]
    hvd.barrier()  # a failing case must not leave the ranks in different places
(out_dir / f"rank{rank}.json").write_text(json.dumps(results))
hvd.shutdown()
