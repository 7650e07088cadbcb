"""One real rank of a 2-rank mesh against a peer written here in Python.

python tcp_peer.py ROLE ATTACK. The core (hvd_selector._core) is rank 0
(ROLE=listen: it accepts) or rank 1 (ROLE=connect: it dials) of a mesh
rendezvoused through an in-process store; this script plays the other rank
with Python's own hmac/hashlib, after ATTACK ran against the core:

- garbage / idle / flood / wrong-key / replay: stray connections reach rank
  0's data listener before the real peer does (flood: 200 idle ones, more
  than the listener holds at once; replay: the bytes a real peer sent in an
  earlier init); init must still succeed with the real peer, and every
  stray must receive the listener's 40-byte hello and nothing else.
- impostor-listener (ROLE=connect): rank 0's published address first
  answers with a wrong server proof; the core must refuse it and retry.
- only-strangers: three wrong-key strays and no real peer: init times out
  naming rank 1 (prints "timeout <message>").
- none: the plain protocol, both roles.
- bad-frame (ROLE=listen): after init the peer answers the core's first
  message with a frame of the wrong length; the core's collective must fail
  with MismatchError (prints "mismatch <sequence> <bytes> <message>": the
  frame the core sent, read here, then the core's error).
- negative-split (ROLE=listen): the peer agrees to the core's alltoall
  (its descriptor sent back as its own) and then sends split counts that
  are negative for rank 0; the core must refuse them with one ValueError
  before anything is copied (prints "refused <message>").

Prints one line "ok <strays> <bytes each stray received>" or raises.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

os.environ["HVD_SELECTOR_SHM"] = "0"  # the pair is the only transport

from hvd_selector import _core

HELLO, ACK = b"hvdtcp1\n", b"hvdtcpok"
KEY = bytes(range(32))
role, attack = sys.argv[1], sys.argv[2]


class LocalStore:
    """The rendezvous store, in process: get waits for the key (both ranks live here)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self._cond:
            self._data[key] = bytes(value)
            self._cond.notify_all()

    def get(self, key: str, timeout_ms: int) -> bytes:
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._data, timeout_ms / 1000):
                raise TimeoutError(f"store: {key} not set")
            return self._data[key]


def proof(label: bytes, key: bytes, nonce: bytes, client: int, server: int, sc: bytes, cc: bytes) -> bytes:
    msg = label + b"\0" + nonce + struct.pack(">II", client, server) + sc + cc
    return hmac.new(key, msg, hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def drain(sock: socket.socket) -> bytes:
    """Everything the core sent on a stray connection, up to its close."""
    sock.settimeout(10)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    return data


def address(store: LocalStore, rank: int) -> tuple[str, int]:
    host, port = store.get(f"tcp/addr/{rank}", 20000).decode().rsplit(" ", 1)
    return host, int(port)


def client_handshake(store: LocalStore, key: bytes) -> tuple[socket.socket, bytes]:
    """Rank 1 proving itself to the core's rank 0; returns the socket and what it sent."""
    nonce = store.get("tcp/nonce", 20000)
    sock = socket.create_connection(address(store, 0), timeout=10)
    hello = recv_exact(sock, 40)
    assert hello[:8] == HELLO, hello
    sc, cc = hello[8:], os.urandom(32)
    sent = HELLO + struct.pack(">II", 1, 0) + cc + proof(b"hvd-selector tcp client", key, nonce, 1, 0, sc, cc)
    sock.sendall(sent)
    answer = recv_exact(sock, 32)
    assert hmac.compare_digest(answer, proof(b"hvd-selector tcp server", key, nonce, 1, 0, sc, cc)), "server proof"
    sock.sendall(ACK)
    return sock, sent


def strays(store: LocalStore, kind: str, captured: bytes) -> list[tuple[socket.socket, int]]:
    """Connections to rank 0's listener by someone without the secret (and bytes already read)."""
    out = []
    nonce = store.get("tcp/nonce", 20000)
    for _ in range(200 if kind == "flood" else 3):
        s, read = socket.create_connection(address(store, 0), timeout=10), 0
        if kind == "garbage":
            s.sendall(os.urandom(4096))
        elif kind == "wrong-key":
            sc, cc = recv_exact(s, 40)[8:], os.urandom(32)
            wrong = proof(b"hvd-selector tcp client", b"x" * 32, nonce, 1, 0, sc, cc)
            s.sendall(HELLO + struct.pack(">II", 1, 0) + cc + wrong)
            read = 40
        elif kind == "replay":
            recv_exact(s, 40)
            s.sendall(captured + ACK)
            read = 40
        out.append((s, read))
    return out


def run_listen() -> str:
    """The core is rank 0 and listens; strays come first, then the real rank 1."""
    captured = b""
    if attack == "replay":  # an earlier init, watched by the attacker
        store = LocalStore()
        done: list[bytes] = []

        def watched() -> None:
            conn, sent = client_handshake(store, KEY)
            mirror_settings(conn)
            done.append(sent)

        t = threading.Thread(target=watched)
        t.start()
        _core.init_gloo(0, 2, 0, 1, store.set, store.get, "127.0.0.1", 20.0, KEY)
        t.join()
        _core.finalize()
        captured = done[0]
    store = LocalStore()
    held: list[tuple[socket.socket, int]] = []
    real: list[socket.socket] = []
    errors: list[BaseException] = []

    def peer() -> None:
        try:
            if attack != "none":
                held.extend(strays(store, "wrong-key" if attack == "only-strangers" else attack, captured))
                time.sleep(0.3)  # the strays are in first and stay
            if attack != "only-strangers":
                real.append(client_handshake(store, KEY)[0])
                mirror_settings(real[0])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=peer)
    t.start()
    try:
        _core.init_gloo(0, 2, 0, 1, store.set, store.get, "127.0.0.1", 3.0 if attack == "only-strangers" else 20.0, KEY)
    except _core.CollectiveTimeoutError as exc:
        t.join()
        return f"timeout {exc}"
    t.join()
    if errors:
        raise errors[0]
    got = [len(drain(s)) + read for s, read in held]
    assert _core.transport().startswith("gloo tcp"), _core.transport()
    if attack == "bad-frame":
        return bad_frame(real[0])
    if attack == "negative-split":
        return negative_split(real[0])
    _core.finalize()
    return f"ok {len(held)} {','.join(map(str, sorted(set(got)))) or '-'}"


def mirror_settings(conn: socket.socket) -> None:
    """Answer init()'s first message, the core's settings record, with the same record:
    the Python rank has the core's settings."""
    frame = recv_exact(conn, 16)
    _seq, length = struct.unpack(">QQ", frame)
    conn.sendall(frame + recv_exact(conn, length))


def bad_frame(conn: socket.socket) -> str:
    """Read the core's first data frame (u64 sequence, u64 length), answer with a frame of
    the wrong length, and report what the core's barrier raised."""
    seen: list[tuple[int, int]] = []

    def answer() -> None:
        seq, length = struct.unpack(">QQ", recv_exact(conn, 16))
        seen.append((seq, length))
        conn.sendall(struct.pack(">QQ", seq, length + 1) + bytes(length + 1))

    t = threading.Thread(target=answer)
    t.start()
    try:
        _core.barrier()
    except _core.MismatchError as exc:
        t.join()
        _core.finalize()
        ((seq, length),) = seen
        return f"mismatch {seq} {length} {exc}"
    raise AssertionError("the core took a frame of the wrong length")


def negative_split(conn: socket.socket) -> str:
    """Mirror the core's first frame (its alltoall descriptor, so the ranks agree), then answer the
    split allgather with rank 1's row [-1, 5]: rank 0 would receive -1 rows from rank 1."""

    def answer() -> None:
        seq, length = struct.unpack(">QQ", recv_exact(conn, 16))
        conn.sendall(struct.pack(">QQ", seq, length) + recv_exact(conn, length))
        seq, length = struct.unpack(">QQ", recv_exact(conn, 16))
        recv_exact(conn, length)
        conn.sendall(struct.pack(">QQ", seq, 16) + struct.pack("=qq", -1, 5))

    import numpy as np

    t = threading.Thread(target=answer)
    t.start()
    try:
        _core.alltoall_prepare(np.zeros(4, dtype=np.float32), [2, 2])
    except ValueError as exc:
        t.join()
        _core.finalize()
        return f"refused {exc}"
    raise AssertionError("the core took a negative split count from its peer")


def run_connect() -> str:
    """The core is rank 1 and dials rank 0, played here (first falsely if asked)."""
    store = LocalStore()
    listener = socket.create_server(("127.0.0.1", 0))
    nonce = os.urandom(32)
    store.set("tcp/nonce", nonce)
    store.set("tcp/addr/0", f"127.0.0.1 {listener.getsockname()[1]}".encode())
    refused = [0]
    errors: list[BaseException] = []
    keep: list[socket.socket] = []

    def serve() -> None:
        try:
            first = attack == "impostor-listener"
            while True:
                conn, _ = listener.accept()
                conn.settimeout(10)
                sc = os.urandom(32)
                conn.sendall(HELLO + sc)
                msg = recv_exact(conn, 80)
                client, server = struct.unpack(">II", msg[8:16])
                cc, mac = msg[16:48], msg[48:]
                assert (client, server) == (1, 0) and msg[:8] == HELLO
                assert hmac.compare_digest(mac, proof(b"hvd-selector tcp client", KEY, nonce, 1, 0, sc, cc))
                if first:  # an answer that does not prove the secret
                    conn.sendall(proof(b"hvd-selector tcp server", b"y" * 32, nonce, 1, 0, sc, cc))
                    try:
                        extra = conn.recv(8)
                    except OSError:
                        extra = b""
                    assert extra != ACK, "the core acknowledged a listener without the secret"
                    conn.close()
                    refused[0] += 1
                    first = False
                    continue
                conn.sendall(proof(b"hvd-selector tcp server", KEY, nonce, 1, 0, sc, cc))
                assert recv_exact(conn, 8) == ACK
                keep.append(conn)
                mirror_settings(conn)
                return
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=serve)
    t.start()
    _core.init_gloo(1, 2, 1, 1, store.set, store.get, "127.0.0.1", 20.0, KEY)
    t.join()
    if errors:
        raise errors[0]
    _core.finalize()
    return f"ok {refused[0]} -"


print(run_listen() if role == "listen" else run_connect())
