"""The launcher's key-value store that Gloo ranks rendezvous through.

Why not a pickle service: Horovod's CVE-2024-10190 was an unauthenticated
pickle endpoint. Here every connection proves knowledge of a shared secret
(HMAC-SHA256 challenge-response in both directions), every message after
that carries an HMAC under a per-connection session key and a sequence
number, and messages are length-prefixed JSON (values base64). Waiting for a
key times out with a message naming the key, so a missing rank never hangs
the others.

Why a gather operation: a rank's ``init()`` needs every rank's record (its
build, then its data address). One request sets this rank's record and waits
until all ``size`` records exist, answered in one reply, so a rank meets the
others in one round trip however many ranks there are (issue 35); a gather
that times out names the ranks that never arrived.

Why one event loop: anyone who can reach the port can open connections, and
before the handshake nobody has proven anything. The server is one thread
with a ``selectors`` loop, so a connection costs a socket and a few hundred
bytes, never a thread; an unproven connection has a short deadline for its
proof, and when too many are unproven at once the oldest is closed, so a
stranger cannot fill a pool that ranks need: a rank that answers the hello
promptly always gets in (issue 36). Proven connections are never evicted.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import heapq
import hmac
import itertools
import json
import os
import random
import resource
import selectors
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

MAGIC = b"HVDS1"
NONCE_BYTES = 32
MAC_BYTES = 32
MAX_FRAME = 64 << 20
HELLO_BYTES = len(MAGIC) + NONCE_BYTES
PROOF_BYTES = NONCE_BYTES + MAC_BYTES  # what a client sends after the hello
HANDSHAKE_SECONDS = 5.0  # an unproven connection's deadline for its proof
MAX_UNPROVEN = 1024  # unproven connections held at once; past it the oldest is closed
ACCEPT_BATCH = 64  # accepts per loop turn: proofs already received are read before more arrivals
NOFILE_WANTED = 65536  # the store raises its process's soft descriptor limit towards this (never the hard one)
RESERVED_FDS = 64  # descriptors left to the rest of the process (rank 0 or the launcher)
MIN_UNPROVEN = 16  # fewer than this many spare descriptors and the store refuses to start
ATTEMPT_SECONDS = 5.0  # a client waits this long for one handshake before it reconnects
MAX_GATHER = 1 << 20  # ranks one gather may wait for


class RendezvousError(RuntimeError):
    """Rendezvous failed: bad secret, timeout, or a broken connection."""


class _Dropped(Exception):
    """The store closed (or never answered) a connection before this rank proved itself: retry."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.digest(key, b"".join(parts), "sha256")  # one-shot, OpenSSL's


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


class _Session:
    """The authenticated framing of one connection after its handshake (both ends use it).

    A frame is a big-endian u32 length, the JSON body, and
    HMAC(session key, direction ‖ sequence number ‖ body).
    """

    def __init__(self, key: bytes, sending: bytes, receiving: bytes) -> None:
        self.key = key
        self.sending = sending
        self.receiving = receiving
        self.sent = 0
        self.received = 0

    def seal(self, message: dict[str, Any]) -> bytes:
        return self.seal_body(_encode(message))

    def seal_body(self, body: bytes) -> bytes:
        """Frame a JSON body already encoded (the store encodes one gather's answer once for every rank)."""
        seq = struct.pack(">Q", self.sent)
        self.sent += 1
        return struct.pack(">I", len(body)) + body + _mac(self.key, self.sending, seq, body)

    @staticmethod
    def length(header: bytes) -> int:
        (length,) = struct.unpack(">I", header)
        if length > MAX_FRAME:
            raise RendezvousError(f"rendezvous message of {length} bytes exceeds the {MAX_FRAME}-byte limit")
        return int(length)

    def open(self, body: bytes, mac: bytes) -> dict[str, Any]:
        seq = struct.pack(">Q", self.received)
        self.received += 1
        if not hmac.compare_digest(mac, _mac(self.key, self.receiving, seq, body)):
            raise RendezvousError("rendezvous message failed authentication (tampered or out of order)")
        message = json.loads(body)
        if not isinstance(message, dict):
            raise RendezvousError("rendezvous message is not a JSON object")
        return message


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _session_key(secret: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    return _mac(secret, b"session", nonce_s, nonce_c)


class _Wait:
    """A request the store cannot answer yet: a get (one key) or a gather (``size`` keys under a prefix).

    ``next`` is the first key not yet set: the connection waits on that key
    alone, so each set wakes only the requests it can move forward.
    """

    __slots__ = ("keys", "next", "prefix", "timeout")

    def __init__(self, keys: list[str], timeout: float, prefix: str | None = None) -> None:
        self.keys = keys
        self.next = 0
        self.timeout = timeout
        self.prefix = prefix  # None for a get

    @property
    def key(self) -> str:
        return self.keys[self.next]

    def timed_out(self, data: dict[str, bytes]) -> str:
        if self.prefix is None:
            return (
                f"timed out after {self.timeout:g}s waiting for key {self.key!r} "
                "(a rank did not start or died before rendezvous)"
            )
        missing = [str(r) for r, key in enumerate(self.keys) if key not in data]
        shown = ", ".join(missing[:16]) + (f" and {len(missing) - 16} more" if len(missing) > 16 else "")
        return (
            f"timed out after {self.timeout:g}s waiting for {len(missing)} of {len(self.keys)} ranks under "
            f"{self.prefix!r}: rank(s) {shown} did not start or died before rendezvous"
        )


class _Conn:
    """One accepted connection: its buffers, its handshake state and its one pending request."""

    __slots__ = ("closed", "closing", "inbox", "nonce_s", "outbox", "session", "sock", "waiting")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.nonce_s = os.urandom(NONCE_BYTES)
        self.session: _Session | None = None  # set once the client proved the secret
        self.waiting: _Wait | None = None  # a get or gather not yet answered (requests are served in order)
        self.closing = False  # close once the outbox is flushed
        self.closed = False


def descriptor_budget() -> int:
    """Descriptors this process may still open: the soft limit (raised towards NOFILE_WANTED) minus those open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = NOFILE_WANTED if hard == resource.RLIM_INFINITY else min(NOFILE_WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 64
    return (NOFILE_WANTED if soft == resource.RLIM_INFINITY else int(soft)) - in_use - RESERVED_FDS


class StoreServer:
    """Key-value store for one launch, served by one event-loop thread; run it with start() / stop().

    ``clients``: the number of ranks that will connect at once (the job
    size); the store checks at start that its descriptor limit holds them
    plus a pool of unproven connections, and refuses with one line naming
    ``ulimit -n`` when it does not, instead of stalling ranks later.
    Counters (read them after the fact): ``rejected`` wrong proofs,
    ``evicted`` unproven connections closed to make room, ``expired``
    unproven connections closed at their deadline, ``peak`` most
    connections open at once, ``requests`` authenticated requests served.
    """

    def __init__(
        self,
        secret: bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        handshake_timeout: float = HANDSHAKE_SECONDS,
        max_unproven: int = MAX_UNPROVEN,
        clients: int = 0,
    ) -> None:
        spare = descriptor_budget() - clients
        if spare < MIN_UNPROVEN:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            raise RendezvousError(
                f"the rendezvous store cannot hold {clients} ranks: this process may open {soft} descriptors "
                f"(ulimit -n) and the store needs one per rank plus {MIN_UNPROVEN + RESERVED_FDS}; "
                "raise ulimit -n (hard limit: ulimit -Hn) or start fewer ranks"
            )
        self.secret = secret
        self.handshake_timeout = handshake_timeout
        self.max_unproven = max(1, min(max_unproven, spare))
        self.rejected = 0
        self.evicted = 0
        self.expired = 0
        self.peak = 0
        self.requests = 0
        self._data: dict[str, bytes] = {}
        self._version = 0  # counts sets: a cached gather answer is good while it is unchanged
        self._answers: dict[tuple[str, int], tuple[int, bytes]] = {}  # (prefix, size) -> (version, JSON body)
        self._unproven: OrderedDict[_Conn, float] = OrderedDict()  # oldest first, with its deadline
        self._conns: set[_Conn] = set()
        self._waiters: dict[str, list[_Conn]] = {}
        self._timers: list[tuple[float, int, _Conn, _Wait]] = []  # pending requests: (deadline, tie, conn, wait)
        self._tie = itertools.count()
        self._paused_until = 0.0  # accept paused after EMFILE with nothing to evict
        self._listener = socket.create_server((host, port), backlog=4096, reuse_port=False)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def unproven(self) -> int:
        """Connections open that have not proven the secret yet."""
        return len(self._unproven)

    @property
    def connections(self) -> int:
        return len(self._conns)

    def start(self) -> StoreServer:
        self._thread = threading.Thread(target=self._loop, name="hvd-rendezvous", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=10)
        for conn in list(self._conns):
            self._close(conn)
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    # ------------------------------------------------------------- the loop
    def _loop(self) -> None:
        while not self._stopping:
            events = self._selector.select(self._wait())
            accept = False
            for key, mask in events:  # connections first: a proof that arrived is read before any eviction
                if key.data == "listener":
                    accept = True
                elif key.data == "wake":
                    self._wake_r.recv(64)
                elif isinstance(key.data, _Conn):
                    if mask & selectors.EVENT_WRITE:
                        self._flush(key.data)
                    if mask & selectors.EVENT_READ and not key.data.closed:
                        self._readable(key.data)
            if accept:
                self._accept()
            self._expire(time.monotonic())

    def _wait(self) -> float:
        """Seconds until the next deadline (unproven connection, pending get or paused accept)."""
        soonest = time.monotonic() + 1.0
        if self._unproven:
            soonest = min(soonest, next(iter(self._unproven.values())))
        if self._timers:
            soonest = min(soonest, self._timers[0][0])
        if self._paused_until:
            soonest = min(soonest, self._paused_until)
        return max(0.0, soonest - time.monotonic())

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._unproven:
                        self.evicted += 1
                        self._close(next(iter(self._unproven)))
                        continue
                    # Nothing to evict: every descriptor is a proven rank. Stop accepting for a moment
                    # instead of spinning on a listener that stays readable.
                    self._selector.unregister(self._listener)
                    self._paused_until = time.monotonic() + 0.1
                    return
                continue  # ECONNABORTED and friends: that connection is gone, take the next
            if len(self._unproven) >= self.max_unproven:
                self.evicted += 1
                self._close(next(iter(self._unproven)))
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            self._conns.add(conn)
            self.peak = max(self.peak, len(self._conns))
            self._unproven[conn] = time.monotonic() + self.handshake_timeout
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._send(conn, MAGIC + conn.nonce_s)

    def _expire(self, now: float) -> None:
        while self._unproven:
            conn, deadline = next(iter(self._unproven.items()))
            if deadline > now:
                break
            self.expired += 1
            self._close(conn)
        while self._timers and self._timers[0][0] <= now:
            _, _, conn, wait = heapq.heappop(self._timers)
            if conn.closed or conn.waiting is not wait:
                continue
            self._unwait(conn)
            self._reply(conn, {"ok": False, "error": wait.timed_out(self._data)})
            self._serve_inbox(conn)
        if self._paused_until and self._paused_until <= now:
            self._paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")

    # ------------------------------------------------------ one connection
    def _readable(self, conn: _Conn) -> None:
        want = PROOF_BYTES - len(conn.inbox) if conn.session is None else 1 << 16
        try:
            chunk = conn.sock.recv(want)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        conn.inbox += chunk
        if conn.session is None:
            if len(conn.inbox) == PROOF_BYTES:
                self._prove(conn)
            return
        self._serve_inbox(conn)

    def _prove(self, conn: _Conn) -> None:
        nonce_c, proof = bytes(conn.inbox[:NONCE_BYTES]), bytes(conn.inbox[NONCE_BYTES:])
        conn.inbox.clear()
        del self._unproven[conn]
        if not hmac.compare_digest(proof, _mac(self.secret, b"client", conn.nonce_s, nonce_c)):
            self.rejected += 1  # counted before the reply, so it is visible once the client knows
            conn.closing = True
            self._send(conn, b"\x00" * MAC_BYTES)  # not a valid server proof: the client reports it
            return
        conn.session = _Session(_session_key(self.secret, conn.nonce_s, nonce_c), sending=b"s", receiving=b"c")
        self._send(conn, _mac(self.secret, b"server", nonce_c, conn.nonce_s))

    def _serve_inbox(self, conn: _Conn) -> None:
        """Serve every complete frame in the inbox, in order, stopping at a get that must wait."""
        session = conn.session
        assert session is not None
        while not conn.closed and conn.waiting is None and len(conn.inbox) >= 4:
            try:
                length = _Session.length(bytes(conn.inbox[:4]))
                if len(conn.inbox) < 4 + length + MAC_BYTES:
                    return
                body = bytes(conn.inbox[4 : 4 + length])
                mac = bytes(conn.inbox[4 + length : 4 + length + MAC_BYTES])
                del conn.inbox[: 4 + length + MAC_BYTES]
                request = session.open(body, mac)
                self.requests += 1
                self._serve(conn, request)
            except (RendezvousError, ValueError):  # forged, reordered or malformed: end the connection
                self._close(conn)

    def _serve(self, conn: _Conn, request: dict[str, Any]) -> None:
        op = request.get("op")
        key = request.get("key")
        wait: _Wait | None = None
        if not isinstance(key, str):
            self._reply(conn, {"ok": False, "error": "request without a key"})
        elif op == "set":
            self._reply(conn, {"ok": True})
            self._set(key, base64.b64decode(str(request.get("value", ""))))
        elif op == "get":
            wait = _Wait([key], float(request.get("timeout", 30.0)))
        elif op == "gather":  # set this rank's key, then wait for every rank's
            rank, size = request.get("rank"), request.get("size")
            if not (isinstance(size, int) and 0 < size <= MAX_GATHER and isinstance(rank, int) and 0 <= rank < size):
                self._reply(conn, {"ok": False, "error": f"gather of rank {rank!r} among {size!r} ranks"})
                return
            self._set(f"{key}{rank}", base64.b64decode(str(request.get("value", ""))))
            wait = _Wait([f"{key}{r}" for r in range(size)], float(request.get("timeout", 30.0)), prefix=key)
        else:
            self._reply(conn, {"ok": False, "error": f"unknown request {op!r}"})
        if wait is not None and not self._advance(conn, wait):
            heapq.heappush(self._timers, (time.monotonic() + wait.timeout, next(self._tie), conn, wait))

    def _set(self, key: str, value: bytes) -> None:
        """Store a value and move on every request that waited for this key."""
        self._data[key] = value
        self._version += 1
        for waiter in self._waiters.pop(key, []):
            wait = waiter.waiting
            if not waiter.closed and wait is not None and wait.key == key and self._advance(waiter, wait):
                self._serve_inbox(waiter)  # its next requests were held behind this one

    def _advance(self, conn: _Conn, wait: _Wait) -> bool:
        """Answer the request if every key it needs exists (True), else park it on the first missing key."""
        while wait.next < len(wait.keys) and wait.key in self._data:
            wait.next += 1
        if wait.next < len(wait.keys):
            conn.waiting = wait
            self._waiters.setdefault(wait.key, []).append(conn)
            return False
        conn.waiting = None
        assert conn.session is not None
        if wait.prefix is None:
            value = base64.b64encode(self._data[wait.keys[0]]).decode()
            self._send(conn, conn.session.seal({"ok": True, "value": value}))
        else:
            self._send(conn, conn.session.seal_body(self._answer(wait.prefix, wait.keys)))
        return True

    def _answer(self, prefix: str, keys: list[str]) -> bytes:
        """One gather's reply body, encoded once for every rank that asks while nothing changes."""
        cached = self._answers.get((prefix, len(keys)))
        if cached is not None and cached[0] == self._version:
            return cached[1]
        body = _encode({"ok": True, "values": [base64.b64encode(self._data[key]).decode() for key in keys]})
        self._answers[(prefix, len(keys))] = (self._version, body)
        return body

    def _unwait(self, conn: _Conn) -> None:
        wait, conn.waiting = conn.waiting, None
        if wait is None:
            return
        waiters = self._waiters.get(wait.key, [])
        if conn in waiters:
            waiters.remove(conn)
        if not waiters:
            self._waiters.pop(wait.key, None)

    def _reply(self, conn: _Conn, message: dict[str, Any]) -> None:
        assert conn.session is not None
        self._send(conn, conn.session.seal(message))

    def _send(self, conn: _Conn, data: bytes) -> None:
        had = bool(conn.outbox)
        conn.outbox += data
        if not had:
            self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            while conn.outbox:
                sent = conn.sock.send(conn.outbox)
                del conn.outbox[:sent]
        except (BlockingIOError, InterruptedError):
            self._selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            return
        except OSError:
            self._close(conn)
            return
        if conn.closing:
            self._close(conn)
            return
        if self._selector.get_key(conn.sock).events & selectors.EVENT_WRITE:
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._unproven.pop(conn, None)
        self._conns.discard(conn)
        self._unwait(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()


def _open(host: str, port: int, timeout: float) -> socket.socket:
    """A connected socket. An address given as numbers skips getaddrinfo, which would import the idna
    codec (stringprep, unicodedata) into every rank: most of a rank's CPU in init() once the rest was cut."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection((host, port), timeout=timeout)


def _connect(host: str, port: int, deadline: float, retry_refused: bool, where: str) -> socket.socket:
    """Connect before the deadline; when rank 0 hosts the store, keep trying while it starts."""
    while True:
        left = deadline - time.monotonic()
        try:
            sock = _open(host, port, max(0.05, left))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            refused = isinstance(exc, (ConnectionRefusedError, ConnectionResetError))
            if not (retry_refused and refused) or left <= 0.2:
                raise RendezvousError(f"cannot reach the rendezvous at {where}: {exc.strerror or exc}") from None
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _handshake(sock: socket.socket, secret: bytes, deadline: float, where: str) -> _Session:
    """Prove the secret and check the store's proof; _Dropped when the store closed or did not answer first."""
    try:
        hello = _recv_exact(sock, HELLO_BYTES, deadline)
    except (OSError, ConnectionError) as exc:
        raise _Dropped(str(exc) or type(exc).__name__) from None
    if not hello.startswith(MAGIC):
        raise RendezvousError(f"{where} is not an hvd-selector rendezvous")
    nonce_s = hello[len(MAGIC) :]
    nonce_c = os.urandom(NONCE_BYTES)
    try:
        sock.sendall(nonce_c + _mac(secret, b"client", nonce_s, nonce_c))
        proof = _recv_exact(sock, MAC_BYTES, deadline)
    except (OSError, ConnectionError) as exc:  # evicted or timed out before the store read the proof
        raise _Dropped(str(exc) or type(exc).__name__) from None
    if not hmac.compare_digest(proof, _mac(secret, b"server", nonce_c, nonce_s)):
        raise RendezvousError(
            f"rendezvous at {where} rejected this rank: shared secret mismatch "
            "(HVD_SELECTOR_SECRET must be the one the launcher generated)"
        )
    return _Session(_session_key(secret, nonce_s, nonce_c), sending=b"c", receiving=b"s")


class StoreClient:
    """One rank's authenticated connection to the launcher's StoreServer.

    A handshake the store drops before this rank proved itself (a stranger's
    connections made the store evict it, or the store was busy) is retried on
    a new connection, with a growing jittered pause, until the timeout.
    """

    def __init__(
        self, host: str, port: int, secret: bytes, timeout: float, prefix: str = "", retry_refused: bool = False
    ) -> None:
        self.timeout = timeout
        self.prefix = prefix
        self.attempts = 0
        where = f"{host}:{port}"
        deadline = time.monotonic() + timeout
        pause = 0.01
        while True:
            sock = _connect(host, port, deadline, retry_refused, where)
            self.attempts += 1
            try:
                session = _handshake(sock, secret, min(deadline, time.monotonic() + ATTEMPT_SECONDS), where)
                break
            except _Dropped as exc:
                sock.close()
                if time.monotonic() + pause >= deadline:
                    raise RendezvousError(
                        f"rendezvous handshake with {where} failed within {timeout:g}s: {exc} "
                        f"({self.attempts} attempts; the store closed or did not answer each one)"
                    ) from None
                time.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(pause * 2, 0.5)
            except RendezvousError:
                sock.close()
                raise
        sock.settimeout(None)
        self._sock = sock
        self._session = session
        self._lock = threading.Lock()
        self.where = where

    def _call(self, requests: list[dict[str, Any]], wait: float) -> list[dict[str, Any]]:
        """Send every request at once, then read the replies (the store answers in order):
        one round trip for many keys instead of one each."""
        with self._lock:
            deadline = time.monotonic() + wait + 10.0  # the whole exchange, not each read
            self._sock.settimeout(wait + 10.0)
            replies = []
            try:
                self._sock.sendall(b"".join(self._session.seal(request) for request in requests))
                for _ in requests:
                    length = _Session.length(_recv_exact(self._sock, 4, deadline))
                    body = _recv_exact(self._sock, length, deadline)
                    reply = self._session.open(body, _recv_exact(self._sock, MAC_BYTES, deadline))
                    if not reply.get("ok"):  # the first failure (a key that timed out) ends the call
                        raise RendezvousError(f"rendezvous: {reply.get('error', 'request failed')}")
                    replies.append(reply)
            except (OSError, ConnectionError) as exc:
                raise RendezvousError(f"lost the rendezvous at {self.where}: {exc}") from None
        return replies

    def set(self, key: str, value: bytes) -> None:
        self._call([{"op": "set", "key": self.prefix + key, "value": base64.b64encode(value).decode()}], self.timeout)

    def get(self, key: str, timeout_ms: int | None = None) -> bytes:
        return self.get_many([key], timeout_ms)[0]

    def gather(self, prefix: str, rank: int, size: int, value: bytes, timeout_ms: int | None = None) -> list[bytes]:
        """Set ``prefix + rank`` to value and return the values of ``prefix + 0 .. size-1`` once all exist:
        one round trip for the whole table (a store without the operation gets a set and a get_many)."""
        wait = self.timeout if timeout_ms is None else timeout_ms / 1000.0
        request = {"op": "gather", "key": self.prefix + prefix, "rank": rank, "size": size, "timeout": wait}
        try:
            (reply,) = self._call([{**request, "value": base64.b64encode(value).decode()}], wait)
        except RendezvousError as exc:
            if "unknown request 'gather'" not in str(exc):
                raise
            self.set(f"{prefix}{rank}", value)
            return self.get_many([f"{prefix}{r}" for r in range(size)], timeout_ms)
        values = reply.get("values")
        if not isinstance(values, list) or len(values) != size:
            raise RendezvousError(f"rendezvous: the gather under {prefix!r} did not return {size} values")
        return [base64.b64decode(str(item)) for item in values]

    def get_many(self, keys: Sequence[str], timeout_ms: int | None = None) -> list[bytes]:
        """The values of `keys`, each waited for as get() waits, in one round trip."""
        wait = self.timeout if timeout_ms is None else timeout_ms / 1000.0
        replies = self._call([{"op": "get", "key": self.prefix + key, "timeout": wait} for key in keys], wait)
        return [base64.b64decode(str(reply["value"])) for reply in replies]

    def local_address(self) -> str:
        """This end's address: the interface that reaches the store (and so, usually, the peers)."""
        return str(self._sock.getsockname()[0])

    def close(self) -> None:
        self._sock.close()


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
