"""Issue 36, item 1: another local user cannot lock a job out of the rendezvous store.

A real second local user (useradd, removed afterwards) holds idle
connections to the store and reopens each one the moment the store closes
it, or floods it with connects, while a real 4-rank job (the gloo build, the
store as the launcher runs it, four rank processes calling ``init()`` and an
allreduce) starts. Before the store was one event loop, 32 idle connections
kept every rank out until ``init()`` failed.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  # the forked attacker cannot import it later; socket needs it
import secrets
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from selector_backend.jobs.rendezvous import StoreServer
from tests.backend.local_user import LocalUser, holding_as_user, second_user

RANKS = 4
TIMEOUT = 30  # the ranks' HVD_SELECTOR_TIMEOUT: init() must finish within it
WORKER = """
import numpy as np, hvd_selector as h
h.init()
out = h.allreduce(np.array([h.rank() + 1.0]), op=h.Sum)
print("sum", int(out[0]), h.size())
"""


@pytest.fixture(scope="module")
def stranger() -> Iterator[LocalUser]:
    with second_user("sto") as user:
        yield user


def hold_and_reopen(address: tuple[str, int], count: int) -> Callable[[], str]:
    """The attacker's step: ``count`` idle connections, each reopened as soon as the store closes it."""

    def step() -> str:
        sel = selectors.DefaultSelector()

        def open_one() -> None:
            try:
                sock = socket.create_connection(address, timeout=5)
            except OSError:
                return
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)

        def loop() -> None:
            while True:  # until the test kills this process
                for key, _ in sel.select(1.0):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(4096)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(sock)
                        sock.close()
                        open_one()
                if len(sel.get_map()) < count:
                    open_one()

        for _ in range(count):
            open_one()
        opened = len(sel.get_map())
        threading.Thread(target=loop, daemon=True).start()
        return f"holding {opened}"

    return step


def connect_flood(address: tuple[str, int]) -> Callable[[], str]:
    """The attacker's step: two threads connect as fast as they can, each keeping its newest 1,000
    connections open (closing its oldest), so the store sees a stream of new idle connections."""

    def step() -> str:
        def loop() -> None:
            kept: deque[socket.socket] = deque()
            while True:  # until the test kills this process
                try:
                    kept.append(socket.create_connection(address, timeout=5))
                except OSError:
                    time.sleep(0.001)
                if len(kept) > 1000:
                    kept.popleft().close()

        for _ in range(2):
            threading.Thread(target=loop, daemon=True).start()
        return "flooding"

    return step


def run_job(gloo_build, server: StoreServer, secret: bytes, cwd: Path) -> list[str]:
    """Start RANKS rank processes against ``server`` as the launcher does; each one's output."""
    host, port = server.address
    procs = []
    for rank in range(RANKS):
        env = gloo_build.env(
            HVD_SELECTOR_RENDEZVOUS=f"{host}:{port}",
            HVD_SELECTOR_SECRET=secret.hex(),
            HVD_SELECTOR_RANK=str(rank),
            HVD_SELECTOR_SIZE=str(RANKS),
            HVD_SELECTOR_LOCAL_RANK=str(rank),
            HVD_SELECTOR_LOCAL_SIZE=str(RANKS),
            HVD_SELECTOR_TIMEOUT=str(TIMEOUT),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        outputs.append(f"rc={proc.returncode} {out.strip()}")
    return outputs


def expect_job_done(outputs: list[str]) -> None:
    total = sum(range(1, RANKS + 1))
    assert outputs == [f"rc=0 sum {total} {RANKS}"] * RANKS, "\n".join(outputs)


@pytest.mark.slow
@pytest.mark.parametrize("held", [64, 1500])
def test_init_succeeds_while_a_stranger_holds_and_reopens_connections(
    gloo_build, stranger: LocalUser, tmp_path: Path, held: int
) -> None:
    """64 idle connections (twice the old store's pool) or 1,500 (past the store's unproven bound of
    1,024, so the store evicts and the stranger reopens continuously): the job still starts."""
    secret = secrets.token_bytes(32)
    server = StoreServer(secret, clients=RANKS).start()
    try:
        with holding_as_user(stranger, hold_and_reopen(server.address, held)) as answer:
            assert answer == f"holding {held}", answer
            deadline = time.monotonic() + 10
            while server.unproven < min(held, 1024) and time.monotonic() < deadline:
                time.sleep(0.05)  # the store has accepted them
            assert server.unproven >= min(held, 1024), server.unproven
            expect_job_done(run_job(gloo_build, server, secret, tmp_path))
        assert server.rejected == 0
    finally:
        server.stop()


@pytest.mark.slow
def test_init_succeeds_through_a_connect_flood(gloo_build, stranger: LocalUser, tmp_path: Path) -> None:
    secret = secrets.token_bytes(32)
    server = StoreServer(secret, clients=RANKS).start()
    try:
        with holding_as_user(stranger, connect_flood(server.address)) as flooding:
            assert flooding == "flooding"
            time.sleep(1.0)  # the flood is under way before the ranks start
            expect_job_done(run_job(gloo_build, server, secret, tmp_path))
    finally:
        server.stop()
