"""SyncBatchNorm's synchronised path (the statistics allgather and the gradient allreduce, through
NCCL on CUDA) at 1 rank against torch's batch_norm, float32 and float16.

    hvd-selector run -np 1 python sync_batch_norm.py
"""

import torch
import torch.nn.functional as F

import hvd_selector.torch as hvd
from hvd_selector.torch.sync_batch_norm import _SyncBatchNormFunction

hvd.init()
torch.cuda.set_device(0)
torch.manual_seed(0)
for dtype in (torch.float32, torch.float16):
    x = torch.randn(8, 4, 5, device="cuda", dtype=dtype)
    w = torch.randn(4, device="cuda", requires_grad=True)
    b = torch.randn(4, device="cuda", requires_grad=True)
    ours_x = x.clone().requires_grad_()
    ref_x = x.clone().float().requires_grad_()
    ours = _SyncBatchNormFunction.apply(
        ours_x, w, b, torch.zeros(4, device="cuda"), torch.ones(4, device="cuda"), 1e-5, 0.1
    )
    ref_w = w.detach().clone().requires_grad_()
    ref_b = b.detach().clone().requires_grad_()
    stats = torch.zeros(4, device="cuda"), torch.ones(4, device="cuda")
    ref = F.batch_norm(ref_x, *stats, ref_w, ref_b, True, 0.1, 1e-5)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    ref.backward(grad.float())
    assert ours_x.grad is not None and ref_x.grad is not None and w.grad is not None and ref_w.grad is not None
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    out_diff = (ours.float() - ref).abs().max().item()
    dx_diff = (ours_x.grad.float() - ref_x.grad).abs().max().item()
    dw_diff = (w.grad - ref_w.grad).abs().max().item()
    ok = torch.allclose(ours.float(), ref, atol=tol) and torch.allclose(ours_x.grad.float(), ref_x.grad, atol=tol * 10)
    print(dtype, "out", out_diff, "dx", dx_diff, "dw", dw_diff, "ok" if ok else "MISMATCH", flush=True)
hvd.shutdown()
print("clean exit", flush=True)
