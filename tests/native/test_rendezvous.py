"""The launcher's store: HMAC authentication, no pickles, timeouts."""

from __future__ import annotations

import json
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
    client._channel.sock.sendall(struct.pack(">I", len(body)) + body + b"\x00" * 32)
    client._channel.sock.settimeout(3)
    assert client._channel.sock.recv(1) == b""  # server hung up, nothing was stored
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
    """2,000 connections that never authenticate: the store holds at most its cap in handshake
    threads, closes the rest at once, and a rank with the secret still gets in while they are open."""
    server = StoreServer(b"s" * 32, handshake_timeout=1.0).start()
    flood: list[socket.socket] = []
    before = threading.active_count()
    peak = 0
    try:
        for n in range(2000):
            flood.append(socket.create_connection(server.address, timeout=5))
            if n % 50 == 0:
                peak = max(peak, threading.active_count() - before)
        deadline = time.monotonic() + 10
        while server.refused < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the server has taken most of them off its backlog
            peak = max(peak, threading.active_count() - before)
        assert server.unauthenticated <= rendezvous.MAX_UNAUTHENTICATED
        assert peak <= rendezvous.MAX_UNAUTHENTICATED + 2, peak  # before: one thread per connection
        assert server.refused >= 1500
        # The flood stays open: its handshakes time out, and the rank retries until it gets a slot.
        client = StoreClient(*server.address, b"s" * 32, timeout=5)
        client.set("k", b"v")
        assert client.get("k") == b"v"
        client.close()
    finally:
        for sock in flood:
            sock.close()
        server.stop()
