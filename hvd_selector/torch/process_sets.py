"""Horovod's process sets: collectives restricted to a subset of the ranks.

Every rank calls add_process_set / remove_process_set in the same order
(ids are handed out by a counter that is therefore the same everywhere);
the members build a sub-communicator in the native core, the others only
remember the ranks so ``included()`` answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import _api


class ProcessSet:
    """A set of global ranks; ``process_set_id`` is known once registered."""

    def __init__(self, ranks_or_comm: Sequence[int]) -> None:
        if not isinstance(ranks_or_comm, Sequence) or isinstance(ranks_or_comm, str | bytes):
            raise ValueError("ProcessSet takes a list of ranks (MPI communicators are not supported)")
        self.ranks: list[int] | None = sorted(int(r) for r in ranks_or_comm)
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


def _reset() -> None:
    """Forget every set (init() and shutdown(): the communicators are gone)."""
    global _next_id
    for ps in _registered.values():
        ps._invalidate()
    _registered.clear()
    _next_id = 1


def _check_ranks(ranks: Sequence[int]) -> list[int]:
    members = sorted(int(r) for r in ranks)
    n = _api.size()
    if not members or len(set(members)) != len(members) or members[0] < 0 or members[-1] >= n:
        raise ValueError(f"process set ranks {list(ranks)} must be distinct ranks in 0..{n - 1}")
    return members


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a set on every rank (call it on all ranks, in the same order)."""
    global _next_id, _sequence
    from . import mpi_ops

    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps!r} is already registered")
    members = _check_ranks(ps._members())
    for other in _registered.values():
        if other.ranks == members:
            raise ValueError(f"a process set with ranks {members} is already registered ({other!r})")
    ps.ranks = members
    set_id = _next_id
    _next_id += 1
    _sequence += 1
    seq = _sequence
    mpi_ops._engine_call(
        "add_process_set",
        lambda: _api._connect_process_set(set_id, members, seq) if _api.rank() in members else None,
        name=f"process_set.add.{seq}",
    )
    ps.process_set_id = set_id
    _registered[set_id] = ps
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a set (every rank, same order); False when it was not registered."""
    from . import mpi_ops

    set_id = process_set.process_set_id
    if not set_id or _registered.get(set_id) is not process_set:
        return False
    mpi_ops._engine_call(
        "remove_process_set",
        lambda: _api._core.remove_process_set(set_id) if process_set.included() else None,
        name=f"process_set.remove.{set_id}",
    )
    del _registered[set_id]
    process_set._invalidate()
    return True


def _id_of(process_set: ProcessSet) -> int:
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set!r} is not registered; call hvd.add_process_set() on every rank first")
    if not process_set.included():
        raise ValueError(f"this rank ({_api.rank()}) is not a member of {process_set!r}")
    return process_set.process_set_id
