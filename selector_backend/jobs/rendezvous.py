"""The launcher's key-value store that Gloo ranks rendezvous through.

Why not a pickle service: Horovod's CVE-2024-10190 was an unauthenticated
pickle endpoint. Here every connection proves knowledge of a shared secret
(HMAC-SHA256 challenge-response in both directions), every message after
that carries an HMAC under a per-connection session key and a sequence
number, and messages are length-prefixed JSON (values base64). Waiting for a
key times out with a message naming the key, so a missing rank never hangs
the others.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import socketserver
import struct
import threading
import time
from typing import Any

MAGIC = b"HVDS1"
NONCE_BYTES = 32
MAC_BYTES = 32
MAX_FRAME = 64 << 20
MAX_UNAUTHENTICATED = 32  # connections the store serves at once before they prove the secret


class RendezvousError(RuntimeError):
    """Rendezvous failed: bad secret, timeout, or a broken connection."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """Read n bytes; with a deadline the whole read (not each recv) is bounded."""
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(left)
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class _Channel:
    """Authenticated framing over one socket (both ends use it)."""

    def __init__(self, sock: socket.socket, session: bytes, sending: bytes, receiving: bytes) -> None:
        self.sock = sock
        self.session = session
        self.sending = sending
        self.receiving = receiving
        self.sent = 0
        self.received = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        seq = struct.pack(">Q", self.sent)
        self.sent += 1
        mac = _mac(self.session, self.sending, seq, body)
        self.sock.sendall(struct.pack(">I", len(body)) + body + mac)

    def recv(self, deadline: float | None = None) -> dict[str, Any]:
        (length,) = struct.unpack(">I", _recv_exact(self.sock, 4, deadline))
        if length > MAX_FRAME:
            raise RendezvousError(f"rendezvous message of {length} bytes exceeds the {MAX_FRAME}-byte limit")
        body = _recv_exact(self.sock, length, deadline)
        mac = _recv_exact(self.sock, MAC_BYTES, deadline)
        seq = struct.pack(">Q", self.received)
        self.received += 1
        if not hmac.compare_digest(mac, _mac(self.session, self.receiving, seq, body)):
            raise RendezvousError("rendezvous message failed authentication (tampered or out of order)")
        message = json.loads(body)
        if not isinstance(message, dict):
            raise RendezvousError("rendezvous message is not a JSON object")
        return message


class _Handler(socketserver.BaseRequestHandler):
    server: StoreServer

    def handle(self) -> None:
        try:
            channel = self._handshake()
        finally:
            self.server.handshake_done()
        if channel is None:
            return
        channel.sock.settimeout(None)
        try:
            while True:
                try:
                    request = channel.recv()
                except ConnectionError:
                    return
                channel.send(self.server.serve(request))
        except (OSError, ConnectionError, RendezvousError, ValueError):
            return

    def _handshake(self) -> _Channel | None:
        """The authenticated channel, or None (wrong secret, too slow, gone)."""
        sock: socket.socket = self.request
        # One deadline for the whole handshake: a peer dripping a byte at a
        # time cannot hold the connection past it (issue 12, finding 4).
        deadline = time.monotonic() + self.server.handshake_timeout
        sock.settimeout(self.server.handshake_timeout)
        nonce_s = os.urandom(NONCE_BYTES)
        try:
            sock.sendall(MAGIC + nonce_s)
            nonce_c = _recv_exact(sock, NONCE_BYTES, deadline)
            proof = _recv_exact(sock, MAC_BYTES, deadline)
            if not hmac.compare_digest(proof, _mac(self.server.secret, b"client", nonce_s, nonce_c)):
                self.server.rejected += 1  # counted before the reply, so it is visible once the client knows
                sock.sendall(b"\x00" * MAC_BYTES)  # not a valid server proof: the client reports it
                return None
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(_mac(self.server.secret, b"server", nonce_c, nonce_s))
        except (OSError, ConnectionError, RendezvousError):
            return None
        session = _mac(self.server.secret, b"session", nonce_s, nonce_c)
        return _Channel(sock, session, sending=b"s", receiving=b"c")


class StoreServer(socketserver.ThreadingTCPServer):
    """Key-value store for one launch; run it with start() / stop().

    A connection gets a thread only while fewer than ``max_unauthenticated``
    others are still in their handshake: anyone who can reach the port can
    open connections, and before the handshake nobody has proven anything, so
    a flood of them is closed at once instead of costing a thread each
    (``refused`` counts them). Clients retry a connection closed that way
    until their deadline.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # a burst of connections waits in the kernel, not in SYN retries

    def __init__(
        self,
        secret: bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        handshake_timeout: float = 10.0,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.secret = secret
        self.handshake_timeout = handshake_timeout
        self.max_unauthenticated = max_unauthenticated
        self.unauthenticated = 0
        self.refused = 0
        self.rejected = 0
        self._count_lock = threading.Lock()
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)

    def start(self) -> StoreServer:
        # A short poll: stop() (shutdown) waits for the loop to notice, and the launcher exits after it.
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="hvd-rendezvous", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Room for one more connection in its handshake? (socketserver closes it when not.)"""
        with self._count_lock:
            if self.unauthenticated >= self.max_unauthenticated:
                self.refused += 1
                return False
            self.unauthenticated += 1
            return True

    def handshake_done(self) -> None:
        with self._count_lock:
            self.unauthenticated -= 1

    def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        key = request.get("key")
        if not isinstance(key, str):
            return {"ok": False, "error": "request without a key"}
        if op == "set":
            value = base64.b64decode(str(request.get("value", "")))
            with self._cond:
                self._data[key] = value
                self._cond.notify_all()
            return {"ok": True}
        if op == "get":
            timeout = float(request.get("timeout", 30.0))
            deadline = time.monotonic() + timeout
            with self._cond:
                while key not in self._data:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return {
                            "ok": False,
                            "error": f"timed out after {timeout:g}s waiting for key {key!r} "
                            "(a rank did not start or died before rendezvous)",
                        }
                    self._cond.wait(left)
                return {"ok": True, "value": base64.b64encode(self._data[key]).decode()}
        return {"ok": False, "error": f"unknown request {op!r}"}


def _connect(host: str, port: int, deadline: float, retry_refused: bool, where: str) -> socket.socket:
    """Connect before the deadline; when rank 0 hosts the store, keep trying while it starts."""
    while True:
        left = deadline - time.monotonic()
        try:
            return socket.create_connection((host, port), timeout=max(0.05, left))
        except OSError as exc:
            refused = isinstance(exc, (ConnectionRefusedError, ConnectionResetError))
            if not (retry_refused and refused) or left <= 0.2:
                raise RendezvousError(f"cannot reach the rendezvous at {where}: {exc.strerror or exc}") from None
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


class StoreClient:
    """One rank's authenticated connection to the launcher's StoreServer."""

    def __init__(
        self, host: str, port: int, secret: bytes, timeout: float, prefix: str = "", retry_refused: bool = False
    ) -> None:
        self.timeout = timeout
        self.prefix = prefix
        where = f"{host}:{port}"
        deadline = time.monotonic() + timeout
        while True:
            sock = _connect(host, port, deadline, retry_refused, where)
            try:
                hello = _recv_exact(sock, len(MAGIC) + NONCE_BYTES, deadline)
                break
            except (ConnectionError, TimeoutError) as exc:
                # Closed before the hello: the store is busy with other unauthenticated connections.
                sock.close()
                if isinstance(exc, TimeoutError) or time.monotonic() + 0.1 >= deadline:
                    raise RendezvousError(
                        f"rendezvous handshake with {where} failed within {timeout:g}s: {exc}"
                    ) from None
                time.sleep(0.1)
            except OSError as exc:
                sock.close()
                raise RendezvousError(f"rendezvous handshake with {where} failed within {timeout:g}s: {exc}") from None
        try:
            if not hello.startswith(MAGIC):
                raise RendezvousError(f"{where} is not an hvd-selector rendezvous")
            nonce_s = hello[len(MAGIC) :]
            nonce_c = os.urandom(NONCE_BYTES)
            sock.sendall(nonce_c + _mac(secret, b"client", nonce_s, nonce_c))
            proof = _recv_exact(sock, MAC_BYTES, deadline)
            if not hmac.compare_digest(proof, _mac(secret, b"server", nonce_c, nonce_s)):
                raise RendezvousError(
                    f"rendezvous at {where} rejected this rank: shared secret mismatch "
                    "(HVD_SELECTOR_SECRET must be the one the launcher generated)"
                )
        except (OSError, ConnectionError) as exc:
            sock.close()
            raise RendezvousError(f"rendezvous handshake with {where} failed within {timeout:g}s: {exc}") from None
        except RendezvousError:
            sock.close()
            raise
        session = _mac(secret, b"session", nonce_s, nonce_c)
        self._channel = _Channel(sock, session, sending=b"c", receiving=b"s")
        self._lock = threading.Lock()
        self.where = where

    def _call(self, request: dict[str, Any], wait: float) -> dict[str, Any]:
        with self._lock:
            deadline = time.monotonic() + wait + 10.0  # the whole exchange, not each read
            self._channel.sock.settimeout(wait + 10.0)
            try:
                self._channel.send(request)
                reply = self._channel.recv(deadline)
            except (OSError, ConnectionError) as exc:
                raise RendezvousError(f"lost the rendezvous at {self.where}: {exc}") from None
        if not reply.get("ok"):
            raise RendezvousError(f"rendezvous: {reply.get('error', 'request failed')}")
        return reply

    def set(self, key: str, value: bytes) -> None:
        self._call({"op": "set", "key": self.prefix + key, "value": base64.b64encode(value).decode()}, self.timeout)

    def get(self, key: str, timeout_ms: int | None = None) -> bytes:
        wait = self.timeout if timeout_ms is None else timeout_ms / 1000.0
        reply = self._call({"op": "get", "key": self.prefix + key, "timeout": wait}, wait)
        return base64.b64decode(str(reply["value"]))

    def local_address(self) -> str:
        """This end's address: the interface that reaches the store (and so, usually, the peers)."""
        return str(self._channel.sock.getsockname()[0])

    def close(self) -> None:
        self._channel.sock.close()


class LocalStore:
    """In-process store for a single rank started without the launcher."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self._data[key] = bytes(value)

    def get(self, key: str, timeout_ms: int | None = None) -> bytes:
        if key not in self._data:
            raise RendezvousError(f"rendezvous: key {key!r} missing in a single-process run")
        return self._data[key]

    def close(self) -> None:
        pass
