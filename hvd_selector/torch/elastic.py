"""``horovod.torch.elastic``: TorchState and the ``run`` decorator for PyTorch training loops.

The same model as hvd_selector.elastic (docs/guide/elastic.md); here a reset
stops and restarts the background engine (hvd_selector.torch's shutdown() and
init()), the host check and the sync go through the PyTorch API, and the
extra values of a TorchState travel as broadcast_object sends them (torch's
weights-only loader, never plain pickle).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..elastic import HostsUpdatedInterrupt, ObjectState, State, make_run
from . import functions, mpi_ops


def _reset() -> None:
    mpi_ops.shutdown()
    mpi_ops.init()


run = make_run(_reset)


class TorchState(ObjectState):
    """A model, its optimizer and any other values (``epoch=0, batch=0``): committed, restored, synced together."""

    def __init__(
        self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, **values: Any
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self._model_saved: dict[str, Any] = {}
        self._optimizer_saved: dict[str, Any] = {}
        super().__init__(**values)

    def save(self) -> None:
        super().save()
        if self.model is not None:
            self._model_saved = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._optimizer_saved = copy.deepcopy(self.optimizer.state_dict())

    def restore(self) -> None:
        super().restore()
        if self.model is not None:
            self.model.load_state_dict(self._model_saved)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._optimizer_saved)

    def sync(self) -> None:
        """Rank 0's model, optimizer and values on every rank.

        broadcast_optimizer_state steps an optimizer that has no state yet once
        (with the gradients left from the failed step, or zeros): the model is
        put back as it was before that step, then takes rank 0's parameters.
        """
        if self.optimizer is not None:
            kept = copy.deepcopy(self.model.state_dict()) if self.model is not None else None
            functions.broadcast_optimizer_state(self.optimizer, root_rank=0)
            if self.model is not None and kept is not None:
                self.model.load_state_dict(kept)
        if self.model is not None:
            functions.broadcast_parameters(self.model.state_dict(), root_rank=0)
        for name, value in functions.broadcast_object(self._values(), 0, name="elastic.state").items():
            setattr(self, name, value)
        self.save()

    def _any_rank(self, flag: bool) -> bool:
        flags = mpi_ops.allreduce(torch.tensor([1 if flag else 0]), op=mpi_ops.Max, name="elastic.hosts_updated")
        return bool(flags.item())


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
