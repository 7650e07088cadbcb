"""Horovod's process sets: the ProcessSet type and this process's registry of them.

Every rank registers and removes sets in the same order (ids come from a
counter that is therefore the same everywhere); registering one is itself a
collective of the engine, so ``add_process_set`` / ``remove_process_set``
live in mpi_ops, which imports this module (never the other way round).
The members build a sub-communicator in the native core, the others only
remember the ranks so ``included()`` answers. A set may have no member (the
odd ranks of a one-rank job): every rank registers it, none can use it.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .. import _api


class ProcessSet:
    """A set of global ranks; ``process_set_id`` is known once registered."""

    def __init__(self, ranks_or_comm: Iterable[int]) -> None:
        if not isinstance(ranks_or_comm, Iterable) or isinstance(ranks_or_comm, str | bytes):
            raise ValueError("ProcessSet takes a list of ranks (MPI communicators are not supported)")
        ranks = list(ranks_or_comm)
        if any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in ranks):
            raise ValueError(f"ProcessSet takes a list of int ranks, got {ranks!r}")
        self.ranks: list[int] | None = sorted(int(r) for r in ranks)
        self.process_set_id: int | None = None

    def _invalidate(self) -> None:
        self.process_set_id = None

    def _members(self) -> list[int]:
        if self.ranks is None:  # the global set before init()
            return list(range(_api.size()))
        return self.ranks

    def size(self) -> int:
        return len(self._members())

    def rank(self) -> int:
        """This process's rank within the set (-1 when it is not a member)."""
        me = _api.rank()
        members = self._members()
        return members.index(me) if me in members else -1

    def included(self) -> bool:
        return _api.rank() in self._members()

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self) -> None:
        self.ranks = None
        self.process_set_id = 0


global_process_set: ProcessSet = _GlobalProcessSet()

_registered: dict[int, ProcessSet] = {}
_next_id = 1
_sequence = 0


class Registration(NamedTuple):
    """What every rank agrees on before a set's communicator is built."""

    set_id: int
    members: list[int]
    seq: int  # numbers the registrations of this process (the same on every rank)


def reset() -> None:
    """Forget every set (init() and shutdown(): the communicators are gone)."""
    global _next_id
    for ps in _registered.values():
        ps._invalidate()
    _registered.clear()
    _next_id = 1
    global_process_set.process_set_id = 0


def _check_ranks(ranks: Sequence[int]) -> list[int]:
    members = sorted(ranks)
    n = _api.size()
    if len(set(members)) != len(members) or (members and (members[0] < 0 or members[-1] >= n)):
        raise ValueError(f"process set ranks {list(ranks)} must be distinct ranks in 0..{n - 1}")
    return members


def reserve(process_set: ProcessSet | Iterable[int]) -> tuple[ProcessSet, Registration]:
    """Check a set this rank is about to register and hand out its id."""
    global _next_id, _sequence
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps!r} is already registered")
    members = _check_ranks(ps._members())
    for other in _registered.values():
        if other.ranks == members:
            raise ValueError(f"a process set with ranks {members} is already registered ({other!r})")
    ps.ranks = members
    _sequence += 1
    registration = Registration(_next_id, members, _sequence)
    _next_id += 1
    return ps, registration


def commit(ps: ProcessSet, set_id: int) -> ProcessSet:
    ps.process_set_id = set_id
    _registered[set_id] = ps
    return ps


def registered_id(process_set: ProcessSet) -> int | None:
    """The set's id when this process registered it (never the global set's 0)."""
    set_id = process_set.process_set_id
    return set_id if set_id and _registered.get(set_id) is process_set else None


def forget(process_set: ProcessSet) -> None:
    set_id = process_set.process_set_id
    if set_id is not None:
        _registered.pop(set_id, None)
    process_set._invalidate()


def id_of(process_set: ProcessSet, what: str) -> int:
    """The id of a set this rank may run `what` on (TypeError/ValueError otherwise)."""
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a hvd.ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set!r} is not registered; call hvd.add_process_set() on every rank first")
    if not process_set.included():
        raise ValueError(f"this rank ({_api.rank()}) is not a member of {process_set!r}")
    return process_set.process_set_id
