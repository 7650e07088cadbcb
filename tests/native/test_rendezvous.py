"""The launcher's store: HMAC authentication, no pickles, timeouts."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from selector_backend.jobs import rendezvous

RendezvousError, StoreClient, StoreServer = rendezvous.RendezvousError, rendezvous.StoreClient, rendezvous.StoreServer


@pytest.fixture()
def server():
    srv = StoreServer(b"s" * 32).start()
    yield srv
    srv.stop()


def test_set_get_round_trip(server: StoreServer) -> None:
    a = StoreClient(*server.address, b"s" * 32, timeout=5)
    b = StoreClient(*server.address, b"s" * 32, timeout=5)
    a.set("rank_0", b"\x00\xffaddress")
    assert b.get("rank_0") == b"\x00\xffaddress"
    a.close()
    b.close()


def test_wrong_secret_is_rejected_quickly(server: StoreServer) -> None:
    start = time.monotonic()
    with pytest.raises(RendezvousError, match="shared secret mismatch"):
        StoreClient(*server.address, b"x" * 32, timeout=5)
    assert time.monotonic() - start < 2
    assert server.rejected == 1


def test_missing_key_times_out_with_its_name(server: StoreServer) -> None:
    client = StoreClient(*server.address, b"s" * 32, timeout=5)
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=r"timed out after 0\.5s waiting for key 'rank_1'"):
        client.get("rank_1", timeout_ms=500)
    assert time.monotonic() - start < 3


def test_get_many_answers_in_order_waiting_for_keys_set_later(server: StoreServer) -> None:
    """Rank 0 reads every rank's build record with one pipelined get_many: the store answers in
    order, a key set while the batch waits arrives in its place, and a missing key ends the
    batch with its own name."""
    a = StoreClient(*server.address, b"s" * 32, timeout=5)
    b = StoreClient(*server.address, b"s" * 32, timeout=5)
    for r in (0, 1, 3):
        a.set(f"build/{r}", f"record {r}".encode())
    late = threading.Timer(0.3, lambda: a.set("build/2", b"record 2"))
    late.start()
    try:
        assert b.get_many([f"build/{r}" for r in range(4)]) == [f"record {r}".encode() for r in range(4)]
    finally:
        late.join()
    with pytest.raises(RendezvousError, match=r"waiting for key 'build/9'"):
        b.get_many(["build/0", "build/9", "build/1"], timeout_ms=300)
    a.close()
    b.close()


def test_unreachable_rendezvous() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(RendezvousError, match="cannot reach the rendezvous"):
        StoreClient("127.0.0.1", port, b"s" * 32, timeout=2)


def test_tampered_message_is_refused(server: StoreServer) -> None:
    """After the handshake every frame is MACed: a forged frame ends the connection."""
    client = StoreClient(*server.address, b"s" * 32, timeout=5)
    body = json.dumps({"op": "set", "key": "k", "value": ""}).encode()
    client._sock.sendall(struct.pack(">I", len(body)) + body + b"\x00" * 32)
    client._sock.settimeout(3)
    assert client._sock.recv(1) == b""  # server hung up, nothing was stored
    assert "k" not in server._data


@pytest.mark.slow
def test_wrong_secret_through_init(gloo_build, tmp_path: Path) -> None:
    """A rank with the wrong secret gets a one-line RendezvousError from init()."""
    from devtools.native_builds import python

    srv = StoreServer(b"s" * 32).start()
    try:
        host, port = srv.address
        proc = python(
            gloo_build,
            "import hvd_selector as h\ntry:\n h.init()\nexcept h.RendezvousError as e:\n print('ERR', e)",
            cwd=tmp_path,
            HVD_SELECTOR_RENDEZVOUS=f"{host}:{port}",
            HVD_SELECTOR_SECRET="ab" * 32,
            HVD_SELECTOR_RANK="0",
            HVD_SELECTOR_SIZE="2",
            HVD_SELECTOR_LOCAL_RANK="0",
            HVD_SELECTOR_LOCAL_SIZE="2",
        )
    finally:
        srv.stop()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ERR rendezvous at 127.0.0.1:") and "shared secret mismatch" in proc.stdout


@pytest.mark.slow
def test_missing_rank_times_out_in_init(gloo_build, tmp_path: Path) -> None:
    from devtools.native_builds import python

    srv = StoreServer(b"s" * 32).start()
    try:
        host, port = srv.address
        start = time.monotonic()
        proc = python(
            gloo_build,
            "import hvd_selector as h\ntry:\n h.init()\nexcept Exception as e:\n print(type(e).__name__, e)",
            cwd=tmp_path,
            HVD_SELECTOR_RENDEZVOUS=f"{host}:{port}",
            HVD_SELECTOR_SECRET=(b"s" * 32).hex(),
            HVD_SELECTOR_RANK="0",
            HVD_SELECTOR_SIZE="2",
            HVD_SELECTOR_LOCAL_RANK="0",
            HVD_SELECTOR_LOCAL_SIZE="2",
            HVD_SELECTOR_TIMEOUT="2",
        )
        elapsed = time.monotonic() - start
    finally:
        srv.stop()
    assert "CollectiveTimeoutError" in proc.stdout and "timed out after 2s" in proc.stdout, proc.stdout + proc.stderr
    assert elapsed < 20


def test_a_connection_flood_costs_no_thread_per_connection() -> None:
    """2,000 connections that never authenticate: the store's one loop thread holds them (no thread
    each), closes the oldest past its bound, and a rank with the secret gets in while they stay open."""
    server = StoreServer(b"s" * 32, handshake_timeout=30.0, max_unproven=500).start()
    flood: list[socket.socket] = []
    before = threading.active_count()
    peak = 0
    try:
        for n in range(2000):
            flood.append(socket.create_connection(server.address, timeout=5))
            if n % 50 == 0:
                peak = max(peak, threading.active_count() - before)
        deadline = time.monotonic() + 10
        while server.evicted < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the loop has taken them all off its backlog
        assert peak == 0, peak  # before: a handshake thread per connection, up to 32
        assert server.unproven <= 500 and server.evicted >= 1500, (server.unproven, server.evicted)
        # The flood stays open and within its deadline: the rank's fast handshake still completes.
        client = StoreClient(*server.address, b"s" * 32, timeout=5)
        client.set("k", b"v")
        assert client.get("k") == b"v"
        client.close()
        assert server.rejected == 0
    finally:
        for sock in flood:
            sock.close()
        server.stop()


def test_gets_wait_in_the_loop_not_in_threads(server: StoreServer) -> None:
    """200 ranks blocked in get at once cost no server thread; one set answers them all in order."""
    before = threading.active_count()
    clients = [StoreClient(*server.address, b"s" * 32, timeout=10) for _ in range(200)]
    got: list[bytes] = []
    waiting = [threading.Thread(target=lambda c=c: got.append(c.get("late"))) for c in clients]
    for thread in waiting:
        thread.start()
    time.sleep(0.5)
    assert threading.active_count() - before == len(waiting)  # only the test's own waiting threads
    setter = StoreClient(*server.address, b"s" * 32, timeout=10)
    setter.set("late", b"here")
    setter.close()
    for thread in waiting:
        thread.join(timeout=10)
    assert got == [b"here"] * 200
    for client in clients:
        client.close()


def test_too_many_ranks_for_the_descriptor_limit_is_one_error() -> None:
    """A job larger than the store's descriptor limit is refused at start, naming ulimit -n, not stalled."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft))  # no raising past it
        with pytest.raises(RendezvousError, match=r"cannot hold \d+ ranks: .*raise ulimit -n"):
            StoreServer(b"s" * 32, clients=soft)
    finally:
        if os.geteuid() == 0:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_dropped_handshake_is_retried() -> None:
    """A store that drops the rank's first connections (evicted before its proof was read) does
    not fail the rank: it reconnects within its timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    real = StoreServer(b"s" * 32).start()
    dropped: list[int] = []

    def drop_two_then_forward() -> None:
        for n in range(3):
            conn, _ = listener.accept()
            if n < 2:
                if n == 1:  # a hello, the rank's proof read, then closed: evicted mid-handshake
                    conn.sendall(rendezvous.MAGIC + b"n" * rendezvous.NONCE_BYTES)
                    conn.recv(rendezvous.PROOF_BYTES)
                conn.close()  # n == 0: closed before the hello
                dropped.append(n)
                continue
            upstream = socket.create_connection(real.address)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=drop_two_then_forward, daemon=True).start()
    try:
        client = StoreClient(*listener.getsockname()[:2], b"s" * 32, timeout=10)
        client.set("k", b"v")
        assert client.get("k") == b"v" and client.attempts == 3 and dropped == [0, 1]
        client.close()
    finally:
        listener.close()
        real.stop()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(1 << 16):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        dst.close()


@pytest.mark.slow
def test_a_job_past_the_descriptor_limit_is_refused_before_any_rank_starts(gloo_build, tmp_path: Path) -> None:
    """hvd-selector run -np 300 under ulimit -n 200: one line naming ulimit -n, exit 4, no rank started."""
    import resource
    import subprocess
    import sys

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))

    marker = tmp_path / "started"
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "run", "-np", "300", "touch", str(marker)],
        cwd=tmp_path,
        env=gloo_build.env(),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=low_limit,
    )
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hvd-selector: error: the rendezvous store cannot hold 300 ranks")
    assert "ulimit -n" in lines[0] and not marker.exists()
