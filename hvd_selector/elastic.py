"""Elastic training (Horovod's ``hvd.elastic``): state that survives a change of the job's ranks.

Horovod's model, rank-level restart inside the same process: the training
function runs under ``@run``; when a peer fails, its collective raises
HorovodInternalError, the state goes back to its last ``commit()``, and the
worker leaves the old mesh (``shutdown()``), joins the launcher's next
generation (``init()``: a new store, a new secret, a new mesh) and takes rank
0's state (``sync()``). When the launcher adds workers, ``commit()`` raises
HostsUpdatedInterrupt on every rank at the same step and the job re-forms
with them. docs/guide/elastic.md says what the launcher does.

ObjectState carries JSON values (numbers, strings, lists, dicts): its
``sync()`` sends JSON, never pickle, between ranks.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from . import _api

RESET_LIMIT = 1000  # resets one worker goes through before it gives up (a loop must end)

F = TypeVar("F", bound=Callable[..., Any])


class HostsUpdatedInterrupt(RuntimeError):
    """The launcher changed the job's hosts: leave the current mesh and join the next generation.

    ``skip_sync`` (Horovod's): the new generation need not take rank 0's
    state. check_host_updates() never sets it: the new workers that joined
    take the state in a collective that every rank must enter.
    """

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the elastic job's hosts changed")
        self.skip_sync = skip_sync


class State:
    """What a training loop must not lose when the job re-forms; subclasses say how to save and send it."""

    def __init__(self) -> None:
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: list[Callable[[], None]]) -> None:
        """Run these after every re-formation (e.g. to scale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Save the state as the point to return to, then check whether the launcher changed the hosts."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """HostsUpdatedInterrupt on every rank at once when the launcher has a newer generation.

        Each rank asks the launcher, then the ranks agree by an allreduce
        (max), so no rank leaves while another goes on into the next step.
        """
        if self._any_rank(_api.elastic_hosts_updated()):
            raise HostsUpdatedInterrupt()

    def _any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (an allreduce of the framework's own API)."""
        newer = np.array([1 if flag else 0], dtype=np.int32)
        return bool(_api.allreduce(newer, op=_api.Max, name="elastic.hosts_updated")[0])

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError


def broadcast_json(value: Any, root_rank: int = 0, name: str = "elastic.state") -> Any:
    """``value`` as root_rank holds it, on every rank: JSON bytes through two broadcasts."""
    payload = json.dumps(value).encode() if _api.rank() == root_rank else b""
    length = _api.broadcast(np.array([len(payload)], dtype=np.int64), root_rank, name=f"{name}.len")
    data = np.frombuffer(payload, dtype=np.uint8) if payload else np.zeros(int(length[0]), dtype=np.uint8)
    received = _api.broadcast(data, root_rank, name=f"{name}.data")
    return json.loads(bytes(received)) if _api.rank() != root_rank else value


class ObjectState(State):
    """Plain values as attributes (``state.epoch``, ``state.batch``), saved by deep copy, synced as JSON."""

    def __init__(self, **values: Any) -> None:
        super().__init__()
        self._names = list(values)
        for name, value in values.items():
            setattr(self, name, value)
        self._saved: dict[str, Any] = {}
        self.save()

    def _values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._names}

    def save(self) -> None:
        self._saved = copy.deepcopy(self._values())

    def restore(self) -> None:
        for name, value in copy.deepcopy(self._saved).items():
            setattr(self, name, value)

    def sync(self) -> None:
        for name, value in broadcast_json(self._values()).items():
            setattr(self, name, value)
        self.save()


def _reset() -> None:
    """Leave this generation's mesh and join the launcher's next one."""
    _api.shutdown()
    _api.init()


def make_run(reset: Callable[[], None]) -> Callable[[F], F]:
    """The ``run`` decorator of a framework whose re-formation is ``reset`` (shutdown, then init)."""

    def run(func: F) -> F:
        """Run ``func(state, ...)`` until it returns, re-forming the job whenever a peer fails or hosts change.

        After a HorovodInternalError the state returns to its last commit; after
        either event the worker joins the next generation, runs the state's reset
        callbacks and takes rank 0's state. A failure while joining (the launcher
        moved on again) is one more reset.
        """

        @functools.wraps(func)
        def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
            reset_required, skip_sync = False, False
            for _ in range(RESET_LIMIT):
                try:
                    if reset_required:
                        reset()
                        state.on_reset()
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except (_api.HorovodInternalError, _api.RendezvousError):  # a peer failed, or the generation
                    state.restore()  # we were joining was replaced before it formed
                    skip_sync = False
                except HostsUpdatedInterrupt as interrupt:
                    skip_sync = interrupt.skip_sync
                reset_required = True
            raise RuntimeError(f"the elastic job re-formed {RESET_LIMIT} times without finishing; giving up")

        return wrapper  # type: ignore[return-value]

    return run


run = make_run(_reset)


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "broadcast_json", "make_run", "run"]
