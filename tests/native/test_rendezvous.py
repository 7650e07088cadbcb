"""The launcher's store: HMAC authentication, no pickles, timeouts."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
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


def _gather_all(server: StoreServer, size: int, prefix: str = "build/", **kw) -> list[list[bytes] | BaseException]:
    """Every rank of `size` gathers its record at once (a thread and a connection each)."""
    results: list[list[bytes] | BaseException] = [RuntimeError("not run")] * size
    clients = [StoreClient(*server.address, b"s" * 32, timeout=5) for _ in range(size)]

    def rank(r: int) -> None:
        try:
            results[r] = clients[r].gather(prefix, r, size, f"record {r}".encode(), **kw)
        except BaseException as exc:  # reported to the test
            results[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    for client in clients:
        client.close()
    return results


def test_gather_answers_every_rank_exactly_the_whole_table_in_one_request(server: StoreServer) -> None:
    """Each of 12 ranks sends one gather and gets back exactly 12 records, in rank order; the
    store encodes the table once and counts one request per rank."""
    results = _gather_all(server, 12)
    assert results == [[f"record {r}".encode() for r in range(12)]] * 12
    assert server._data.keys() >= {f"build/{r}" for r in range(12)}
    assert len(server._answers) == 1  # one table, encoded once (every rank's reply reused it)


def test_gather_waits_for_late_ranks_and_plain_sets(server: StoreServer) -> None:
    """A gather parks until the last record exists, whether it comes from a gather or a set."""
    a, b, c = (StoreClient(*server.address, b"s" * 32, timeout=5) for _ in range(3))
    late = threading.Timer(0.3, lambda: c.set("mesh/2", b"two"))
    late.start()
    try:
        box: list[list[bytes]] = []
        other = threading.Thread(target=lambda: box.append(b.gather("mesh/", 1, 3, b"one")))
        other.start()
        assert a.gather("mesh/", 0, 3, b"zero") == [b"zero", b"one", b"two"]
        other.join(timeout=5)
        assert box == [[b"zero", b"one", b"two"]]
    finally:
        late.join()
    for client in (a, b, c):
        client.close()


def test_a_gather_missing_ranks_times_out_naming_them(server: StoreServer) -> None:
    """Two of five ranks never come: each waiting rank gets one error naming ranks 3 and 4."""
    start = time.monotonic()
    clients = [StoreClient(*server.address, b"s" * 32, timeout=5) for _ in range(3)]
    errors: list[str] = []

    def rank(r: int) -> None:
        try:
            clients[r].gather("build/", r, 5, b"x", timeout_ms=500)
        except RendezvousError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert (
        errors
        == [
            "rendezvous: timed out after 0.5s waiting for 2 of 5 ranks under 'build/': "
            "rank(s) 3, 4 did not start or died before rendezvous"
        ]
        * 3
    )
    assert time.monotonic() - start < 4
    for client in clients:  # the connection still works after the timeout
        assert client.get("build/0") == b"x"
        client.close()


def test_a_gather_with_a_bad_rank_or_size_is_refused(server: StoreServer) -> None:
    client = StoreClient(*server.address, b"s" * 32, timeout=5)
    for rank, size in ((3, 3), (-1, 2), (0, 0)):
        with pytest.raises(RendezvousError, match=f"gather of rank {rank} among {size} ranks"):
            client.gather("build/", rank, size, b"x")
    assert not server._data
    client.close()


def test_a_gather_with_a_forged_mac_stores_nothing(server: StoreServer) -> None:
    """A gather frame with a wrong MAC, or a stranger without the secret, ends the connection before
    anything is stored or any record leaves the store."""
    honest = StoreClient(*server.address, b"s" * 32, timeout=5)
    honest.set("build/0", b"secret record")
    client = StoreClient(*server.address, b"s" * 32, timeout=5)
    body = json.dumps({"op": "gather", "key": "build/", "rank": 1, "size": 2, "value": "eA==", "timeout": 1}).encode()
    client._sock.sendall(struct.pack(">I", len(body)) + body + b"\x00" * 32)
    client._sock.settimeout(3)
    assert client._sock.recv(1) == b""  # hung up without an answer
    assert "build/1" not in server._data
    with pytest.raises(RendezvousError, match="shared secret mismatch"):
        StoreClient(*server.address, b"x" * 32, timeout=5).gather("build/", 1, 2, b"x")
    assert "build/1" not in server._data
    honest.close()
    client.close()


def test_gather_falls_back_on_a_store_without_it(server: StoreServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank of this release rendezvousing through an older launcher's store (no gather) sets its
    record and reads the table key by key instead."""
    original = StoreServer._serve

    def without_gather(self: StoreServer, conn: object, request: dict) -> None:
        if request.get("op") == "gather":
            self._reply(conn, {"ok": False, "error": "unknown request 'gather'"})
            return
        original(self, conn, request)

    monkeypatch.setattr(StoreServer, "_serve", without_gather)
    results = _gather_all(server, 3)
    assert results == [[b"record 0", b"record 1", b"record 2"]] * 3


def test_a_numeric_store_address_is_reached_without_the_idna_codec() -> None:
    """Connecting to 127.0.0.1 skips getaddrinfo, whose idna codec import (stringprep, unicodedata)
    cost each rank more CPU in init() than everything else it did."""
    code = (
        "import sys\n"
        "from selector_backend.jobs.rendezvous import StoreClient, StoreServer\n"
        "srv = StoreServer(b's' * 32).start()\n"
        "StoreClient(*srv.address, b's' * 32, timeout=5).close()\n"
        "srv.stop()\n"
        "print(sorted(m for m in ('encodings.idna', 'stringprep') if m in sys.modules))\n"
    )
    repo = Path(rendezvous.__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


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


@pytest.mark.slow
def test_init_meets_the_others_in_two_store_requests_per_rank(gloo_build, tmp_path: Path) -> None:
    """A rank's init() sends the store two requests whatever the job size: one gather of the build
    records and one of the data addresses (before: a set and a get for the build, the verdict, the
    nonce, a set and a get per lower peer)."""
    ranks = 4
    srv = StoreServer(b"s" * 32).start()
    try:
        host, port = srv.address
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import numpy as np, hvd_selector as h\nh.init()\n"
                    "print(h.allreduce(np.ones(2), op=h.Sum).tolist())\nh.shutdown()",
                ],
                cwd=tmp_path,
                env=gloo_build.env(
                    HVD_SELECTOR_RENDEZVOUS=f"{host}:{port}",
                    HVD_SELECTOR_SECRET=(b"s" * 32).hex(),
                    HVD_SELECTOR_RANK=str(rank),
                    HVD_SELECTOR_SIZE=str(ranks),
                    HVD_SELECTOR_LOCAL_RANK=str(rank),
                    HVD_SELECTOR_LOCAL_SIZE=str(ranks),
                    HVD_SELECTOR_TIMEOUT="20",
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank in range(ranks)
        ]
        outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        srv.stop()
    assert [out.strip() for out in outputs] == ["[4.0, 4.0]"] * ranks, outputs
    assert srv.requests == 2 * ranks


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
