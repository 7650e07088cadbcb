"""DistributedOptimizer: allreduce gradients as backward produces them.

A hook on each parameter (torch's post-accumulate-grad hook) starts the
gradient's asynchronous allreduce as soon as backward has accumulated it
``backward_passes_per_step`` times, so communication overlaps the rest of
backward; ``step()`` waits for the results, then runs the wrapped
optimizer's own step.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import mpi_ops
from .compression import Compression
from .functions import broadcast_object
from .process_sets import ProcessSet, global_process_set


def _split(items: list[Any], n: int) -> list[list[Any]]:
    """n nearly equal consecutive groups (Horovod's num_groups)."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        count = base + (1 if i < extra else 0)
        if count:
            out.append(items[start : start + count])
        start += count
    return out


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's class (see DistributedOptimizer)."""

    def _hvd_setup(
        self,
        named_parameters: Any,
        compression: Any,
        backward_passes_per_step: int,
        op: int,
        gradient_predivide_factor: float,
        groups: Any,
        sparse_as_dense: bool,
        process_set: ProcessSet,
    ) -> None:
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [
                (f"allreduce.noname.{i}.{j}", p)
                for i, group in enumerate(self.param_groups)
                for j, p in enumerate(group["params"])
            ]
        if any(not isinstance(entry, tuple) for entry in named):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples")
        names = [k for k, _ in named]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError(f"Parameter names in named_parameters must be unique; duplicates: {', '.join(dups)}")
        unnamed = {id(p) for p in all_params} - {id(p) for _, p in named}
        if unnamed:
            raise ValueError("named_parameters was given, but some model parameters are not named in it")
        if op == mpi_ops.Adasum:
            raise NotImplementedError("Adasum is not supported by hvd_selector.torch")
        if op != mpi_ops.Average and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor is only supported with op=Average")
        self._compression = compression
        self._names = {p: k for k, p in sorted(named, key=lambda kv: kv[0])}
        self._parameter_names = self._names  # Horovod's attribute name
        self.backward_passes_per_step = backward_passes_per_step
        self._delay = {p: backward_passes_per_step for p in all_params}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles: dict[Any, tuple[Any, Any]] = {}
        self._requires_update: set[torch.Tensor] = set()
        self._synchronized = False
        self._should_synchronize = True
        self._group_of: dict[torch.Tensor, tuple[torch.Tensor, ...]] = {}
        self._group_ready: dict[tuple[torch.Tensor, ...], int] = {}
        self._hooks: list[Any] = []
        self._position: dict[torch.Tensor, int] = {}
        if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
            raise ValueError("groups should be a positive integer or a list of lists of torch.Tensor")
        if isinstance(groups, list):
            seen: set[int] = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups")
                    seen.add(id(p))
        self._groups = groups
        if process_set.included() and mpi_ops.size() > 1:
            self._register_hooks()

    def _register_hooks(self) -> None:
        trainable = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if self._groups is not None:
            # Same order everywhere: rank 0's order of the names.
            order = broadcast_object([self._names[p] for p in trainable], 0, process_set=self.process_set)
            trainable.sort(key=lambda p: order.index(self._names[p]))
            if isinstance(self._groups, list):
                ids = {id(p) for p in trainable}
                p_groups = [[p for p in g if id(p) in ids] for g in self._groups]
                grouped = {id(p) for g in p_groups for p in g}
                p_groups += [[p] for p in trainable if id(p) not in grouped]
            else:
                p_groups = _split(trainable, self._groups)
            for g in p_groups:
                if not g:
                    continue
                key = tuple(g)
                self._group_ready[key] = 0
                for p in g:
                    self._group_of[p] = key
        # Each allreduce starts as soon as its gradient is ready: ranks match
        # them by the parameter's name, whatever order backward reaches them in.
        self._position = {p: i for i, p in enumerate(reversed(trainable))}
        for p in trainable:
            self._requires_update.add(p)
            self._hooks.append(p.register_post_accumulate_grad_hook(self._hook))

    def _scales(self) -> tuple[float, float]:
        if self.op == mpi_ops.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p: torch.Tensor) -> tuple[Any, Any]:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        name = self._names.get(p)
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                sparse = mpi_ops.sparse_allreduce_async(grad, name=name, op=self.op, process_set=self.process_set)
                return sparse, None
            grad = grad.to_dense()  # reduced dense; synchronize() hands it back sparse (Horovod)
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scales()
        handle = mpi_ops.allreduce_async_(
            compressed, name=name, op=self.op, prescale_factor=pre, postscale_factor=post, process_set=self.process_set
        )
        return handle, (ctx, compressed)

    def _grouped_allreduce_grad_async(self, group: tuple[torch.Tensor, ...]) -> tuple[Any, Any]:
        for p in group:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif p.grad.is_sparse:
                p.grad = p.grad.to_dense()
        pairs = [self._compression.compress(p.grad) for p in group]
        pre, post = self._scales()
        handle = mpi_ops.grouped_allreduce_async_(
            [c for c, _ in pairs],
            name=self._names.get(group[0]),
            op=self.op,
            prescale_factor=pre,
            postscale_factor=post,
            process_set=self.process_set,
        )
        return handle, [(ctx, c) for c, ctx in pairs]

    def _hook(self, p: torch.Tensor) -> None:
        if p in self._handles and self._handles[p][0] is not None and self._delay[p] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before step(); "
                "increase backward_passes_per_step to accumulate gradients locally"
            )
        self._delay[p] -= 1
        if self._delay[p] > 0:
            self._handles[p] = (None, None)
            return
        group = self._group_of.get(p)
        if group is not None:
            self._group_ready[group] += 1
            if self._group_ready[group] == len(group):
                self._handles[group] = self._grouped_allreduce_grad_async(group)
                for q in group:
                    self._handles.pop(q, None)
                self._group_ready[group] = 0
            else:
                self._handles[p] = (None, None)
            return
        self._handles[p] = self._allreduce_grad_async(p)

    def synchronize(self) -> None:
        """Wait for every gradient's allreduce (starting the ones backward did not reach)."""
        if not self.process_set.included():
            self._synchronized = True
            return
        done: set[Any] = set()
        for key, (handle, _) in self._handles.items():
            if handle is None:
                continue
            done.update(key) if isinstance(key, tuple) else done.add(key)
        for p in sorted(self._requires_update - done, key=lambda q: self._position.get(q, 0)):
            group = self._group_of.get(p)
            if group is not None:
                if group not in self._handles:
                    for q in group:
                        self._handles.pop(q, None)
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
                    self._group_ready[group] = 0
                continue
            self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                continue
            if isinstance(key, tuple):
                outputs = mpi_ops.synchronize(handle)
                for p, out, (cctx, _) in zip(key, outputs, ctx, strict=True):
                    self._delay[p] = self.backward_passes_per_step
                    assert p.grad is not None
                    p.grad.copy_(self._compression.decompress(out, cctx))
                continue
            out = handle() if callable(handle) else mpi_ops.synchronize(handle)
            self._delay[key] = self.backward_passes_per_step
            if ctx is None:  # sparse
                key.grad = out
            elif key.grad.is_sparse:  # sparse_as_dense: the optimizer still gets a sparse gradient
                key.grad = self._compression.decompress(out, ctx[0]).to_sparse()
            else:
                key.grad.copy_(self._compression.decompress(out, ctx[0]))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """step() without synchronize() (after an explicit synchronize(), e.g. to clip)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() after optimizer.synchronize(); "
                    "gradients are reduced twice",
                    stacklevel=2,
                )
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def _hvd_plain_step(self) -> Any:
        """The wrapped optimizer's step, without reducing gradients."""
        return super(self.__class__, self).step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        if any(h is not None for h, _ in self._handles.values()):
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                "optimizer.synchronize(); this is prohibited as it can cause a race condition"
            )
        return super(self.__class__, self).zero_grad(set_to_none)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(state_dict)


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Any = None,
    compression: Any = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = mpi_ops.Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: ProcessSet = global_process_set,
) -> Any:
    """Wrap `optimizer` so step() applies gradients averaged (op) across the set's ranks.

    The result is an instance of a subclass of the optimizer's own class
    built from the same param_groups, as Horovod's is.
    """
    if num_groups and groups is None:
        groups = num_groups
    cls: Any = type(
        optimizer.__class__.__name__,
        (optimizer.__class__,),
        {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")},
    )
    wrapped: Any = cls.__new__(cls)
    init: Any = optimizer.__class__.__init__
    try:  # every hyper-parameter rides in the param groups
        init(wrapped, optimizer.param_groups)
    except TypeError:  # an optimizer with a required argument
        init(wrapped, optimizer.param_groups, **optimizer.defaults)
    wrapped._hvd_setup(
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        groups,
        sparse_as_dense,
        process_set,
    )
    return wrapped
