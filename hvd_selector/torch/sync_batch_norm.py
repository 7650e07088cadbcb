"""SyncBatchNorm: batch normalisation over the batch of every rank (Horovod's ``hvd.SyncBatchNorm``).

Why: with a few samples per rank, per-rank batch statistics are noisy; vision
training normalises over the whole global batch instead. Forward gathers each
rank's (count, mean, variance) per channel and combines them with the
parallel-variance formula (stable, and ranks may hold different batch
sizes); backward sums the two per-channel gradient terms across ranks, so
every rank's input gradient is that of the global batch. The weight and bias
gradients stay per rank, as in any data-parallel layer: DistributedOptimizer
reduces them. Plain torch arithmetic, so CPU and GPU tensors both work; in
eval mode (with running statistics) it is a local BatchNorm.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from . import mpi_ops

STATS = "sync_batch_norm.stats"  # the collectives' names: every rank's layers run them in the same order
GRADS = "sync_batch_norm.grads"


def _channels(x: torch.Tensor) -> tuple[list[int], list[int]]:
    """The dims statistics reduce over, and the shape that broadcasts a per-channel vector."""
    dims = [0, *range(2, x.dim())]
    shape = [1, x.shape[1], *([1] * (x.dim() - 2))]
    return dims, shape


def combine(counts: torch.Tensor, means: torch.Tensor, variances: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global mean and biased variance per channel from each rank's count, mean and biased variance.

    counts: (ranks,), means/variances: (ranks, C); a rank with no sample weighs nothing.
    """
    total = counts.sum()
    weights = (counts / total).unsqueeze(1)
    mean = (weights * means).sum(0)
    variance = (weights * (variances + (means - mean) ** 2)).sum(0)
    return mean, variance


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        eps: float,
        factor: float,
    ) -> torch.Tensor:
        dims, shape = _channels(x)
        compute = torch.promote_types(x.dtype, torch.float32)
        xs = x.to(compute)
        count = x.numel() // x.shape[1]
        if count:
            variance, mean = torch.var_mean(xs, dim=dims, unbiased=False)
        else:
            mean = variance = xs.new_zeros(x.shape[1])
        row = torch.cat([xs.new_tensor([float(count)]), mean, variance]).to(torch.float64).unsqueeze(0)
        rows = mpi_ops.synchronize(mpi_ops.allgather_async(row, name=STATS))
        channels = x.shape[1]
        counts = rows[:, 0]
        g_mean, g_var = combine(counts, rows[:, 1 : 1 + channels], rows[:, 1 + channels :])
        total = float(counts.sum())
        if total <= 1:
            raise ValueError(f"SyncBatchNorm: expected more than 1 value per channel across ranks, got {total:g}")
        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                unbiased = g_var * (total / (total - 1))
                running_mean.mul_(1 - factor).add_(g_mean.to(running_mean.dtype), alpha=factor)
                running_var.mul_(1 - factor).add_(unbiased.to(running_var.dtype), alpha=factor)
        mean_c = g_mean.to(compute)
        invstd = torch.rsqrt(g_var.to(compute) + eps)
        xhat = (xs - mean_c.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.to(compute).view(shape)
        if bias is not None:
            y = y + bias.to(compute).view(shape)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.total = total
        ctx.has_bias = bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        xhat, weight, invstd = ctx.saved_tensors
        dims, shape = _channels(xhat)
        dys = dy.to(xhat.dtype)
        sum_dy = dys.sum(dims)
        sum_dy_xhat = (dys * xhat).sum(dims)
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy.to(dy.dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            both = torch.cat([sum_dy, sum_dy_xhat])
            summed = mpi_ops.synchronize(mpi_ops.allreduce_async(both, op=mpi_ops.Sum, name=GRADS))
            channels = xhat.shape[1]
            mean_dy = (summed[:channels] / ctx.total).view(shape)
            mean_dy_xhat = (summed[channels:] / ctx.total).view(shape)
            scale = invstd.view(shape)
            if weight is not None:
                scale = scale * weight.to(xhat.dtype).view(shape)
            grad_x = (scale * (dys - mean_dy - xhat * mean_dy_xhat)).to(dy.dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over the batch of every rank (N-dimensional: input (N, C, ...)); Horovod's constructor.

    num_features: C; eps; momentum (None: a cumulative average); affine;
    track_running_stats. Every rank must call forward (and backward) of its
    SyncBatchNorm layers in the same order.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else float(self.momentum)
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        stats = self.running_mean, self.running_var
        if not self.training and self.track_running_stats:  # eval with running statistics: local
            return F.batch_norm(input, *stats, self.weight, self.bias, False, 0.0, self.eps)
        if mpi_ops.size() == 1:
            return F.batch_norm(input, *stats, self.weight, self.bias, True, factor, self.eps)
        out: torch.Tensor = _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean, self.running_var, self.eps, factor
        )
        return out
