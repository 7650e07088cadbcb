"""The background thread that runs every hvd_selector.torch collective.

Why a thread: Horovod's async API (``allreduce_async`` ... ``synchronize``)
lets training overlap communication with backward; the gradient hooks only
enqueue. Why a negotiation round: ranks enqueue at different moments, so
before each step the ranks of the head item's process set agree on how many
leading, fusable allreduces they all hold (the minimum); those are reduced as
one grouped call (the core packs them into fusion buffers of at most
HOROVOD_FUSION_THRESHOLD bytes). The head waits up to HOROVOD_CYCLE_TIME
milliseconds for more work unless someone already waits on it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _core

CYCLE_ENV = "HOROVOD_CYCLE_TIME"


def cycle_time() -> float:
    """Seconds the head allreduce waits for more work to fuse (env in ms, default 1)."""
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


@dataclass
class Work:
    """One enqueued collective. ``fuse_key`` is set for allreduces (op, scales, set)."""

    what: str
    process_set_id: int
    run: Callable[[], Any] | None = None
    fuse_key: tuple[Any, ...] | None = None
    ins: list[Any] = field(default_factory=list)
    outs: list[Any] = field(default_factory=list)
    finish: Callable[[list[Any]], Any] | None = None
    name: str | None = None
    submitted: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    waited: bool = False
    result: Any = None
    error: BaseException | None = None

    def nbytes(self) -> int:
        return sum(int(t.numel()) * int(t.element_size()) for t in self.ins)


class Engine:
    """A FIFO of Work, drained by one daemon thread (one per init())."""

    def __init__(self, threshold: Callable[[], int]) -> None:
        self._queue: deque[Work] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._threshold = threshold
        self._cycle = cycle_time()
        self._thread = threading.Thread(target=self._loop, name="hvd_selector.torch", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> Work:
        with self._cond:
            if self._stopping:
                raise ValueError("hvd_selector.torch is shutting down; call init() again first")
            self._queue.append(work)
            self._cond.notify_all()
        return work

    def wait(self, work: Work) -> None:
        if not work.done.is_set():
            with self._cond:
                work.waited = True
                self._cond.notify_all()
            work.done.wait()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # ----------------------------------------------------------- the thread
    def _fusable(self) -> int:
        head = self._queue[0]
        if head.fuse_key is None:
            return 1
        n = 0
        for work in self._queue:
            if work.fuse_key != head.fuse_key:
                break
            n += 1
        return n

    def _ready(self, head: Work) -> bool:
        if head.fuse_key is None or head.waited or self._stopping:
            return True
        if time.monotonic() - head.submitted >= self._cycle:
            return True
        limit = self._threshold()
        total = 0
        for work in self._queue:
            if work.fuse_key != head.fuse_key:
                return True  # something else follows: nothing more to fuse
            total += work.nbytes()
        return total >= limit

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                head = self._queue[0]
                while not self._ready(head):
                    self._cond.wait(max(self._cycle - (time.monotonic() - head.submitted), 0.0))
                mine = self._fusable()
            try:
                _core.use_process_set(head.process_set_id)
                agreed = min(_core.allgather_prepare(np.empty((mine, 0), dtype=np.uint8)))
                count = max(1, min(agreed, mine))
            except BaseException as exc:
                with self._cond:
                    self._queue.popleft()
                self._fail([head], exc)
                continue
            with self._cond:
                batch = [self._queue.popleft() for _ in range(count)]
            self._execute(batch)

    def _fail(self, batch: list[Work], exc: BaseException) -> None:
        for work in batch:
            work.error = exc
            work.done.set()

    def _execute(self, batch: list[Work]) -> None:
        try:
            _core.use_process_set(batch[0].process_set_id)
            if batch[0].fuse_key is None:
                assert batch[0].run is not None
                batch[0].result = batch[0].run()
            else:
                op, pre, post, _ = batch[0].fuse_key
                ins = [t for w in batch for t in w.ins]
                outs = [t for w in batch for t in w.outs]
                if len(ins) == 1:
                    _core.allreduce(ins[0], outs[0], op, pre, post)
                else:
                    _core.grouped_allreduce(ins, outs, op, pre, post)
                for work in batch:
                    work.result = work.finish(work.outs) if work.finish else work.outs
        except BaseException as exc:
            self._fail(batch, exc)
            return
        finally:
            with contextlib.suppress(BaseException):
                _core.use_process_set(0)
        for work in batch:
            work.done.set()
