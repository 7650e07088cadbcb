"""The background thread that runs every hvd_selector.torch collective.

Why a thread: Horovod's async API (``allreduce_async`` ... ``synchronize``)
lets training overlap communication with backward; the gradient hooks only
enqueue.

Why negotiation by name: Horovod's coordinator matches collectives across
ranks by their names, so ranks may submit named collectives in different
orders, hold one back while they all pass a barrier, or leave the job's
collectives to the others after ``join()`` (a joined rank stands in with
zeros for their allreduces). Here every rank is its own coordinator: each
round, the ranks allgather (on the global communicator) the descriptions of
the requests they have not announced yet (as JSON, no pickle); every rank
applies the same messages, in rank order, to the same table, so all of them
find the same requests ready, in the same order, and run them in that order
(allreduces of one op/scale/set fused into one grouped call, packed by the
core into buffers of at most HOROVOD_FUSION_THRESHOLD bytes). Requests that
disagree (kind, dtype, shape, op, root) fail on every rank with the reason,
as Horovod's response errors do; the others go on.

Rounds only happen while someone has work: a rank with new requests starts
one (at once when someone waits on them or they cannot be fused, else after
HOROVOD_CYCLE_TIME ms of collecting), and all ranks keep having rounds while
the agreed table holds a request some rank still waits for. When the table
is empty the thread sleeps, and the core's communicator is free for the
numpy-level API. A request that some rank never submits fails, on the ranks
that did, after HVD_SELECTOR_TIMEOUT seconds (Horovod only warns). No stall
check: a round is a core collective under the core's one timeout, so ranks that
drift apart longer than it stop this thread (docs/guide/pytorch.md, "Ranks that
drift apart", says why and what to set).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _core
from . import _host_staging

CYCLE_ENV = "HOROVOD_CYCLE_TIME"
JOIN = (0, "join.noname")
FUSED = ("allreduce", "reducescatter")
WITH_JOINED = ("allreduce", "barrier")  # what a rank that joined still takes part in (Horovod)
SLOT = 2048  # bytes of each rank's message sent in the first allgather of a round
MAX_IDLE_PACE = 0.01  # seconds between rounds when nobody announced anything lately


def cycle_time() -> float:
    """Seconds new fusable work is collected before a round (env in ms, default 1)."""
    text = os.environ.get(CYCLE_ENV, "").strip()
    if not text:
        return 0.001
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{CYCLE_ENV}={text!r} must be a number of milliseconds") from None
    if value < 0:
        raise ValueError(f"{CYCLE_ENV}={text!r} must be >= 0 milliseconds")
    return value / 1000.0


class Request(NamedTuple):
    """What a rank announces about one collective (Horovod's Request message).

    A tuple, so it travels as a JSON list as it is; a peer's comes back with
    lists where this rank has tuples, and only peers' copies are compared.
    """

    set_id: int
    name: str
    what: str
    dtypes: Sequence[str] = ()
    shapes: Sequence[Sequence[int]] = ()
    op: int = -1
    pre: float = 1.0
    post: float = 1.0
    root: int = -1
    members: Sequence[int] = ()  # () for the global set
    device: str = "cpu"  # where the tensors live: "cpu" or "cuda"

    @classmethod
    def from_wire(cls, item: Any) -> Request:
        req = cls(*item)
        if not (isinstance(req.set_id, int) and isinstance(req.name, str) and isinstance(req.what, str)):
            raise TypeError("set id, name and kind must be an int and two strings")
        return req

    @property
    def key(self) -> tuple[int, str]:
        return (self.set_id, self.name)


def describe(tensors: Sequence[torch.Tensor]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...], str]:
    """dtypes, shapes and the device kind of a collective's tensors, as a Request carries them."""
    kinds = {t.device.type for t in tensors}
    if len(kinds) > 1:
        raise RuntimeError(f"the tensors of one collective must all be on one kind of device, got {sorted(kinds)}")
    return (
        tuple(str(t.dtype).removeprefix("torch.") for t in tensors),
        tuple(tuple(int(x) for x in t.shape) for t in tensors),
        kinds.pop() if kinds else "cpu",
    )


@dataclass
class Work:
    """One submitted collective: its Request and how this rank runs it.

    Fused kinds (allreduce, reducescatter) give ``ins``/``outs`` (and
    ``finish`` to build the result); the others give ``run``, called with
    every member's Request in set-rank order once the collective is agreed.
    """

    request: Request
    run: Callable[[list[Request]], Any] | None = None
    ins: list[torch.Tensor] = field(default_factory=list)
    outs: list[torch.Tensor] = field(default_factory=list)
    finish: Callable[[list[Any]], Any] | None = None
    join_device: int = -1  # join(device): the GPU this rank stands in with zeros on (-1: the core's GPU)
    submitted: float = field(default_factory=time.monotonic)
    announced: float = 0.0
    finished: float = 0.0  # time.monotonic() when it completed
    gave_up: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    waited: bool = False
    result: Any = None
    error: BaseException | None = None

    @property
    def what(self) -> str:
        return self.request.what

    @property
    def name(self) -> str:
        return self.request.name

    def nbytes(self) -> int:
        return sum(int(t.numel()) * int(t.element_size()) for t in self.ins)

    def complete(self) -> None:
        self.finished = time.monotonic()
        self.done.set()

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self.complete()


@dataclass
class Response:
    """A request every rank agreed is ready (or failed): the same list on every rank."""

    key: tuple[int, str]
    requests: dict[int, Request]
    error: BaseException | None = None
    last_joined: int = -1

    @property
    def first(self) -> Request:
        return self.requests[min(self.requests)]


class Table:
    """The agreed state: requests announced but not yet ready, and who joined."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: dict[tuple[int, str], dict[int, Request]] = {}
        self.joined: list[int] = []

    def busy(self) -> bool:
        return bool(self.entries)

    def apply(self, messages: list[dict[str, Any]], timeout: float) -> list[Response]:
        """Every rank's message of one round, in rank order -> the responses, in order."""
        for rank, msg in enumerate(messages):
            for req in msg["requests"]:
                self.entries.setdefault(req.key, {})[rank] = req
                if req.key == JOIN and rank not in self.joined:
                    self.joined.append(rank)
        responses = []
        for msg in messages:
            for key in msg["giveups"]:
                entry = self.entries.pop(key, None)
                if entry is not None:
                    responses.append(Response(key, entry, _stalled(key, entry, self._needed(key, entry), timeout)))
        for key, entry in list(self.entries.items()):
            if key != JOIN and self._ready(key, entry):
                del self.entries[key]
                responses.append(Response(key, entry, self._check(key, entry)))
        if self.joined and len(self.joined) == self.size:
            responses.append(Response(JOIN, self.entries.pop(JOIN), last_joined=self.joined[-1]))
            self.joined = []
        return responses

    def _needed(self, key: tuple[int, str], entry: dict[int, Request]) -> set[int]:
        if key[0] == 0:
            return set(range(self.size)) - set(self.joined)
        return set(next(iter(entry.values())).members)

    def _ready(self, key: tuple[int, str], entry: dict[int, Request]) -> bool:
        needed = self._needed(key, entry)
        return bool(needed) and needed <= entry.keys()

    def _check(self, key: tuple[int, str], entry: dict[int, Request]) -> BaseException | None:
        """Horovod's ConstructResponse checks: every rank must ask for the same collective."""
        ranks = sorted(entry)
        first = entry[ranks[0]]
        head = f"{first.what} {first.name!r}"
        for r in ranks[1:]:
            other = entry[r]
            pair = f"rank {ranks[0]} and rank {r}"
            if other.what != first.what:
                return _core.MismatchError(
                    f"{head}: mismatched operations: rank {ranks[0]} did a {first.what}, rank {r} a {other.what}"
                )
            if other.members != first.members:
                return _core.MismatchError(f"{head}: {pair} name different process sets")
            if other.device != first.device:
                return _core.MismatchError(
                    f"{head}: mismatched CPU and GPU tensors: rank {ranks[0]} sent {first.device} tensors, "
                    f"rank {r} {other.device} tensors"
                )
            if len(other.dtypes) != len(first.dtypes):
                return _core.MismatchError(f"{head}: {pair} sent {len(first.dtypes)} and {len(other.dtypes)} tensors")
            if other.dtypes != first.dtypes:
                return _core.MismatchError(
                    f"{head}: mismatched data types: rank {ranks[0]} sent {', '.join(first.dtypes)}, "
                    f"rank {r} sent {', '.join(other.dtypes)}"
                )
            for mine, theirs in zip(first.shapes, other.shapes, strict=True):
                if first.what in ("allgather", "alltoall"):
                    bad = len(mine) != len(theirs) or mine[1:] != theirs[1:]
                else:
                    bad = mine != theirs
                if bad:
                    return _core.MismatchError(
                        f"{head}: mismatched {first.what} tensor shapes: rank {ranks[0]} sent {list(mine)}, "
                        f"rank {r} sent {list(theirs)}"
                    )
            if (other.op, other.pre, other.post) != (first.op, first.pre, first.post):
                return _core.MismatchError(f"{head}: {pair} asked for different reduction ops or scale factors")
            if other.root != first.root:
                return _core.MismatchError(
                    f"{head}: mismatched root ranks: rank {ranks[0]} named {first.root}, rank {r} {other.root}"
                )
        if key[0] == 0 and self.joined and first.what not in WITH_JOINED:
            return _core.HorovodInternalError(
                f"{head}: {first.what} is not supported with Join at this time (rank(s) "
                f"{', '.join(map(str, self.joined))} called join())"
            )
        return None


def _stalled(key: tuple[int, str], entry: dict[int, Request], needed: set[int], timeout: float) -> BaseException:
    missing = sorted(needed - entry.keys())
    first = next(iter(entry.values()))
    return _core.CollectiveTimeoutError(
        f"{first.what} {key[1]!r}: rank(s) {', '.join(map(str, missing)) or '?'} did not submit it within "
        f"{timeout:g} s (HVD_SELECTOR_TIMEOUT); collectives are matched by name, so every rank of the set "
        "must submit it"
    )


def _encode(requests: list[Request], giveups: list[tuple[int, str]], bye: bool) -> bytes:
    body = {"r": requests, "g": giveups, "b": int(bye)}
    return json.dumps(body, separators=(",", ":")).encode()


def _decode(raw: bytes, rank: int) -> dict[str, Any]:
    try:
        body = json.loads(raw)
        return {
            "requests": [Request.from_wire(item) for item in body["r"]],
            "giveups": [(int(s), str(n)) for s, n in body["g"]],
            "bye": bool(body["b"]),
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise _core.PeerFailureError(
            f"hvd_selector.torch: rank {rank} sent a malformed negotiation message ({exc}); restart the job"
        ) from None


def exchange(payload: bytes) -> list[bytes]:
    """Every rank's payload (global communicator): one fixed-size allgather, a second for long ones."""
    size = _core.size()
    if size == 1:
        return [payload]
    _core.use_process_set(0)
    head = np.zeros(SLOT, dtype=np.uint8)
    length = len(payload)
    head[:4] = np.frombuffer(length.to_bytes(4, "little"), dtype=np.uint8)
    first = min(length, SLOT - 4)
    head[4 : 4 + first] = np.frombuffer(payload[:first], dtype=np.uint8)
    heads = np.empty(SLOT * size, dtype=np.uint8)
    _core.allgather(head, heads, [SLOT] * size)
    lengths = [int.from_bytes(heads[r * SLOT : r * SLOT + 4].tobytes(), "little") for r in range(size)]
    parts = [heads[r * SLOT + 4 : r * SLOT + 4 + min(n, SLOT - 4)].tobytes() for r, n in enumerate(lengths)]
    rests = [max(n - (SLOT - 4), 0) for n in lengths]
    if any(rests):
        tail = np.frombuffer(payload[first:], dtype=np.uint8).copy()
        tails = np.empty(sum(rests), dtype=np.uint8)
        _core.allgather(tail, tails, rests)
        offset = 0
        for r, n in enumerate(rests):
            parts[r] += tails[offset : offset + n].tobytes()
            offset += n
    return parts


def zeros_device(kind: str, asked: int, local_rank: int, device_count: int) -> torch.device:
    """Where a joined rank creates the zeros it contributes to the others' allreduce.

    On the others' kind of device: the GPU join(device) named, else the one
    the core's NCCL communicator uses (local_rank modulo the visible GPUs).
    """
    if kind != "cuda":
        return torch.device("cpu")
    if asked >= 0:
        return torch.device("cuda", asked)
    if device_count <= 0:
        raise _core.UnavailableError("a joined rank must stand in with zeros on a GPU, but none is visible")
    return torch.device("cuda", local_rank % device_count)


class Engine:
    """Submitted Work, negotiated and run by one daemon thread (one per init())."""

    def __init__(self, threshold: Callable[[], int], timeout: float) -> None:
        self._new: list[Work] = []
        self._pending: dict[tuple[int, str], Work] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._dead: BaseException | None = None
        self._threshold = threshold
        self._timeout = timeout
        self._cycle = cycle_time()
        self._rank = _core.rank()
        self._table = Table(_core.size())
        self._pace = self._cycle
        self._last_round = 0.0
        self._thread = threading.Thread(target=self._loop, name="hvd_selector.torch", daemon=True)
        self._thread.start()

    @property
    def dead(self) -> BaseException | None:
        """The error that stopped the thread (None while it serves)."""
        return self._dead

    def submit(self, work: Work) -> Work:
        with self._cond:
            if self._dead is not None:
                dead = self._dead
                raise (type(dead) if isinstance(dead, _core.HorovodInternalError) else _core.HorovodInternalError)(
                    f"{work.what}: hvd_selector.torch stopped ({type(dead).__name__}: {dead}); "
                    "call shutdown() and init() again"
                )
            if self._stopping:
                raise ValueError("hvd_selector.torch is shutting down; call init() again first")
            self._new.append(work)
            self._cond.notify_all()
        return work

    def wait(self, work: Work) -> None:
        if not work.done.is_set():
            with self._cond:
                work.waited = True
                self._cond.notify_all()
            work.done.wait()

    def stop(self) -> None:
        """End the thread: work not yet agreed by every rank fails (as in Horovod)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # ----------------------------------------------------------- the thread
    def _local(self, work: Work) -> bool:
        """A set of one rank needs no negotiation."""
        return len(work.request.members) == 1

    def _due(self, now: float) -> float | None:
        """Seconds until this rank should start a round (0: now; None: nothing to do)."""
        if self._stopping:
            return 0.0
        if any(self._local(w) for w in self._new):
            return 0.0
        if self._new:
            if any(w.waited or w.what not in FUSED for w in self._new):
                return 0.0
            if sum(w.nbytes() for w in self._new) >= self._threshold():
                return 0.0
            wait = self._cycle - (now - min(w.submitted for w in self._new))
            if self._table.busy():
                wait = min(wait, self._last_round + self._cycle - now)
            return max(wait, 0.0)
        if self._table.busy():
            return max(self._last_round + self._pace - now, 0.0)
        return None

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # a bug must not leave the waiters hanging
            self._break(exc)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while (due := self._due(time.monotonic())) != 0.0:
                    self._cond.wait(due)
                new, self._new = self._new, []
                stopping = self._stopping
            local = [w for w in new if self._local(w)]
            new = [w for w in new if not self._local(w)]
            for work in local:
                self._pending[work.request.key] = work
            if local and not self._execute([Response(w.request.key, {self._rank: w.request}) for w in local]):
                return
            if stopping:  # what no other rank has heard of fails here; a busy table hears the bye
                self._finish(new, ValueError("hvd_selector.torch was shut down before every rank submitted it"))
                if self._table.busy():
                    self._round([], bye=True)
                return
            if (new or self._table.busy()) and not self._round(new, bye=False):
                return

    def _round(self, new: list[Work], bye: bool) -> bool:
        """One negotiation round; False when the thread must end."""
        now = time.monotonic()
        giveups = []
        for key, work in self._pending.items():
            if not work.gave_up and key != JOIN and now - work.announced >= self._timeout:
                work.gave_up = True
                giveups.append(key)
        for work in new:
            work.announced = now
            self._pending[work.request.key] = work
        try:
            raw = exchange(_encode([w.request for w in new], giveups, bye))
            messages = [_decode(m, r) for r, m in enumerate(raw)]
        except BaseException as exc:
            self._break(exc)
            return False
        self._last_round = time.monotonic()
        anything = any(m["requests"] for m in messages)
        self._pace = self._cycle if anything else min(max(self._pace * 2, self._cycle), MAX_IDLE_PACE)
        responses = self._table.apply(messages, self._timeout)
        if not self._execute(responses):
            return False
        byes = [r for r, m in enumerate(messages) if m["bye"]]
        if byes:
            who = ", ".join(map(str, byes))
            self._break(_core.PeerFailureError(f"rank(s) {who} shut down hvd_selector.torch"))
            return False
        return True

    def _finish(self, works: list[Work], exc: BaseException) -> None:
        for work in works:
            work.fail(exc)

    def _break(self, exc: BaseException) -> None:
        """The communicator can no longer be trusted: fail everything, refuse new work."""
        with self._cond:
            self._dead = exc
            works = list(self._pending.values()) + self._new
            self._pending.clear()
            self._new = []
        self._finish(works, exc)

    def _execute(self, responses: list[Response]) -> bool:
        """Run the agreed responses in order (fusing allreduces); False after a broken communicator."""
        plan: list[Any] = []
        groups: dict[tuple[Any, ...], list[tuple[Request, Work | None]]] = {}
        for resp in responses:
            work = self._pending.pop(resp.key, None)
            if resp.error is not None:
                if work is not None:
                    work.fail(resp.error)
                continue
            first = resp.first
            members = first.members or tuple(range(self._table.size))
            if self._rank not in members:
                continue
            if resp.key == JOIN:
                if work is not None:
                    work.result = resp.last_joined
                    work.complete()
                continue
            if first.what in FUSED:
                fuse = (first.set_id, first.op, first.pre, first.post, first.device)
                if fuse not in groups:
                    groups[fuse] = []
                    plan.append(groups[fuse])
                groups[fuse].append((first, work))
                continue
            plan.append((first, work, [resp.requests[m] for m in members if m in resp.requests]))  # joined: absent
        for step in plan:
            try:
                if isinstance(step, list):
                    self._allreduce(step)
                else:
                    self._run(*step)
            except (_core.PeerFailureError, _core.CollectiveTimeoutError) as exc:
                for rest in plan:
                    for work in [w for _, w in rest] if isinstance(rest, list) else [rest[1]]:
                        if work is not None and not work.done.is_set():
                            work.fail(exc)
                self._break(exc)
                return False
        return True

    def _allreduce(self, group: list[tuple[Request, Work | None]]) -> None:
        first = group[0][0]
        ins: list[torch.Tensor] = []
        outs: list[torch.Tensor] = []
        for req, work in group:
            if work is None:  # this rank joined: it stands in with zeros
                device = self._zeros_device(req.device)
                zeros = [
                    torch.zeros(s, dtype=getattr(torch, d), device=device)
                    for d, s in zip(req.dtypes, req.shapes, strict=True)
                ]
                ins += zeros
                outs += zeros
            else:
                ins += work.ins
                outs += work.outs
        works = [w for _, w in group if w is not None]

        def reduce(ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
            if len(ins) == 1:
                _core.allreduce(ins[0], outs[0], first.op, first.pre, first.post)
            elif ins:
                _core.grouped_allreduce(ins, outs, first.op, first.pre, first.post)

        def run() -> None:
            if _host_staging.needed(first.set_id, ins):
                _host_staging.run_on_host(reduce, ins, outs)
            else:
                reduce(ins, outs)
            for work in works:
                work.result = work.finish(work.outs) if work.finish else work.outs

        self._guarded(first.set_id, works, run)

    def _zeros_device(self, kind: str) -> torch.device:
        joined = self._pending.get(JOIN)
        asked = joined.join_device if joined is not None else -1
        count = torch.cuda.device_count() if kind == "cuda" else 0
        return zeros_device(kind, asked, _core.local_rank(), count)

    def _run(self, first: Request, work: Work | None, peers: list[Request]) -> None:
        if work is None:  # a joined rank in a barrier
            self._guarded(first.set_id, [], _core.barrier)
            return
        run = work.run
        assert run is not None

        def call() -> None:
            work.result = run(peers)

        self._guarded(first.set_id, [work], call)

    def _guarded(self, set_id: int, works: list[Work], run: Callable[[], None]) -> None:
        """Run on the set's communicator; errors go to the works (a broken communicator propagates)."""
        try:
            _core.use_process_set(set_id)
            run()
        except BaseException as exc:
            self._finish(works, exc)
            if isinstance(exc, (_core.PeerFailureError, _core.CollectiveTimeoutError)):
                raise
            return
        finally:
            with contextlib.suppress(BaseException):
                _core.use_process_set(0)
        for work in works:
            work.complete()
