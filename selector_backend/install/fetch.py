"""Fetching from the configured index only: URL policy, bounded retried GETs, verified cache.

Security rules (docs/reference/security.md): https for anything not on
loopback; plain http only to 127.0.0.0/8 / ::1 / localhost; ``file:`` and
plain directories for local indexes. A link on an index page is followed
only if it stays on the index's own origin (or one listed in
``index-file-origins``), and ``file:`` links only from a ``file:`` index;
redirects never leave the origin they started on. Every exchange has an
overall deadline (a server dripping one byte a second cannot hold an
install), and every malformed answer (status line, headers, length,
chunking) is a one-line ExternalError. Every downloaded file is checked
against the index's sha256 before anything uses it, and a mismatch fails
closed. The cache is shared safely between concurrent installs: one lock per
file, downloads land in a temporary file and are renamed into place only
once verified; stale temporary files of killed downloads are swept under
their lock.

urllib/http.client stay the HTTP client (not urllib3/httpx): the backend runs
in pip's build environment, where every extra requirement is one more
download before anything is decided, and neither offers a whole-exchange
deadline anyway (their timeouts bound each socket operation, as urllib's do).
The deadline here is a watchdog that shuts the request's sockets down.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.files.private_cache import CacheDir, cache_unusable, open_required

if TYPE_CHECKING:  # the HTTP client is imported where a request is made: a file:// index never loads it
    import http.client
    import socket
    import urllib.request

DEFAULT_TIMEOUT = 30.0
DEFAULT_DOWNLOAD_TIMEOUT = 600.0
DEFAULT_RETRIES = 3
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_WHEEL_BYTES = 2 * 1024 * 1024 * 1024
USER_AGENT = "hvd-selector-backend"
_CHUNK = 1 << 16


def shown(text: object, limit: int = 200) -> str:
    """Text from a server, safe on one terminal line: control characters become '?', long text is cut."""
    flat = "".join(c if c.isprintable() else "?" for c in str(text))
    return flat if len(flat) <= limit else flat[:limit] + "…"


# ------------------------------------------------------------------ URL policy
def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def normalize_location(location: str) -> str:
    """A URL for ``location`` (a directory path becomes file://); policy violations are InputErrors."""
    try:
        parsed = urllib.parse.urlparse(location)
        parsed.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        raise InputError(f"index {location!r}: not a valid URL ({exc})") from None
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = Path(url2pathname(parsed.path) if parsed.scheme == "file" else location)
        return path.resolve().as_uri()
    if parsed.scheme == "https":
        return location
    if parsed.scheme == "http":
        if is_loopback(parsed.hostname):
            return location
        raise InputError(f"index {location}: plain http is allowed only on loopback; use https://")
    raise InputError(f"index {location}: unsupported scheme {parsed.scheme!r}; use https://, file:// or a path")


def url2pathname(path: str) -> str:
    """``urllib.request.url2pathname`` without importing urllib.request (and with it http.client and ssl)."""
    if os.name == "nt":
        from nturl2path import url2pathname as nt_url2pathname

        return nt_url2pathname(path)
    return urllib.parse.unquote(path)


def origin(url: str) -> tuple[str, str | None, int | None]:
    """(scheme, host, port) with the scheme's default port filled in; a bad URL is an ExternalError."""
    try:
        parsed = urllib.parse.urlparse(url)
        port = parsed.port
    except ValueError as exc:
        raise ExternalError(f"{shown(url)!r}: not a valid URL ({exc})") from None
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    return parsed.scheme, (parsed.hostname or "").lower() or None, port if port is not None else default


def same_origin(a: str, b: str) -> bool:
    return origin(a) == origin(b)


def parse_origins(values: Iterable[str], source: str = "index-file-origins") -> tuple[str, ...]:
    """Validate an allow-list of origins: each ``https://host[:port]`` (or http on loopback)."""
    out = []
    for value in values:
        try:
            parsed = urllib.parse.urlparse(value)
            parsed.port  # noqa: B018
        except ValueError:
            parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path.strip("/"):
            raise InputError(f"{source}: {value!r} is not an origin like https://files.example.org[:port]")
        if parsed.scheme == "http" and not is_loopback(parsed.hostname):
            raise InputError(f"{source}: {value!r}: plain http is allowed only on loopback; use https://")
        out.append(value)
    return tuple(out)


def check_link(index_url: str, link: str, allowed_origins: Iterable[str] = ()) -> str:
    """``link`` (already joined to its page) if the index may send us there, else an IntegrityError.

    A ``file:`` index may link only to files (its own disk); an http(s) index
    only to its own origin or an origin in ``allowed_origins``: an index must
    not make the backend read local files or contact hosts nobody configured.
    """
    index_scheme = urllib.parse.urlparse(index_url).scheme
    link_scheme = urllib.parse.urlparse(link).scheme
    if index_scheme == "file":
        if link_scheme != "file":
            raise IntegrityError(f"{index_url}: a local index links to {shown(link)!r}; only files are allowed there")
        return link
    if link_scheme == "file" or link_scheme not in ("http", "https"):
        raise IntegrityError(
            f"{index_url}: the index links to {shown(link)!r}; only its own origin is allowed, refusing"
        )
    if same_origin(index_url, link) or any(same_origin(o, link) for o in allowed_origins):
        normalize_location(link) if link_scheme == "http" else None  # loopback rule for allow-listed http
        return link
    raise IntegrityError(
        f"{index_url}: the index links to another origin ({shown(link)!r}); refusing. "
        "If that host is trusted, list it in index-file-origins (e.g. -C index-file-origins=https://files.example.org)"
    )


# ------------------------------------------------------------------ deadline
class _Exchange:
    """One request's sockets and its overall deadline: when it passes, the sockets are shut down.

    Shutting a socket down wakes a thread blocked in recv() on it, so the
    deadline holds however slowly a server drips its status line, headers or
    body. Every socket opened for the request (redirect hops included) is
    registered through the connection classes below.
    """

    def __init__(self, seconds: float) -> None:
        import threading

        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Exchange:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        return max(self.end - time.monotonic(), 0.0)

    def track(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._socks.append(sock)
            expired = self.expired
        if expired:
            _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)

    def connection(self, base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        exchange = self

        class Tracked(base):  # type: ignore[valid-type,misc]
            def connect(self) -> None:
                wait = getattr(self, "timeout", None) or DEFAULT_TIMEOUT
                self.timeout = min(float(wait), max(exchange.remaining(), 0.01))
                super().connect()
                exchange.track(self.sock)

        return Tracked


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: only the OS-level effect, safe from another thread
    import socket

    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _opener(exchange: _Exchange) -> urllib.request.OpenerDirector:
    """An opener whose connections all belong to ``exchange`` (proxies from the environment still apply)."""
    from http.client import HTTPConnection, HTTPSConnection
    from urllib.request import HTTPHandler, HTTPRedirectHandler, HTTPSHandler, build_opener

    class NoForeignRedirects(HTTPRedirectHandler):
        max_redirections = 5

        def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
            if not same_origin(req.full_url, newurl):
                raise ExternalError(f"{req.full_url} redirects to another origin ({shown(newurl)!r}); refusing")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    class HTTP(HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(exchange.connection(HTTPConnection), req)

    class HTTPS(HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(
                exchange.connection(HTTPSConnection),
                req,
                context=self._context,  # type: ignore[attr-defined]
            )

    return build_opener(HTTP(), HTTPS(), NoForeignRedirects())


# ------------------------------------------------------------------ GET with retries
class _Retryable(Exception):
    pass


def _content_length(response: Any, url: str) -> int | None:
    headers = getattr(response, "headers", None)
    values = headers.get_all("Content-Length") if headers is not None else None
    if not values:
        return None
    if len(set(values)) != 1 or not values[0].strip().isdigit():
        raise ExternalError(
            f"{shown(url)}: malformed Content-Length {shown(', '.join(values))!r} in the answer; refusing it"
        )
    return int(values[0].strip())


def _read_bounded(
    response: IO[bytes], out: IO[bytes], url: str, max_bytes: int, exchange: _Exchange | None = None
) -> int:
    length = _content_length(response, url)
    if length is not None and length > max_bytes:
        raise ExternalError(f"{shown(url)}: {length} bytes is over the {max_bytes}-byte limit")
    total = 0
    while True:
        chunk = response.read(_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise ExternalError(f"{shown(url)}: more than the {max_bytes}-byte limit")
        out.write(chunk)
    if exchange is not None and exchange.expired:
        raise _Retryable(f"no complete answer within {exchange.seconds:g} s")
    if length is not None and total != length:
        raise _Retryable(f"body cut short ({total} of {length} bytes)")
    return total


def _read_local(path: Path, out: IO[bytes], url: str, max_bytes: int) -> None:
    """A local file, refusing anything that is not a regular file (a FIFO would hang, a device never end)."""
    from selector_backend.files.safeparse import open_regular

    with open(open_regular(path, "the file", ExternalError), "rb") as handle:
        try:
            _read_bounded(handle, out, url, max_bytes)
        except OSError as exc:
            raise ExternalError(f"{path}: cannot read ({exc.strerror or exc})") from None


def check_timeout(value: float, name: str = "timeout") -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name}={value!r} must be a finite number of seconds above 0")
    return float(value)


def fetch_to(
    url: str,
    out: IO[bytes],
    *,
    accept: str | None = None,
    max_bytes: int = MAX_PAGE_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float | None = None,
    retries: int = DEFAULT_RETRIES,
    offline: bool = False,
) -> None:
    """Copy ``url`` into ``out``: retried on 5xx, timeouts, resets, malformed and short answers.

    ``timeout`` bounds each wait on the network; ``deadline`` (default:
    ``timeout``) bounds each whole attempt, connect to last byte.
    """
    timeout = check_timeout(timeout)
    deadline = check_timeout(deadline if deadline is not None else timeout, "deadline")
    url = normalize_location(url) if "://" not in url else url
    scheme = urllib.parse.urlparse(url).scheme
    if scheme == "file":
        _read_local(Path(url2pathname(urllib.parse.urlparse(url).path)), out, url, max_bytes)
        return
    from http.client import HTTPException
    from urllib.error import HTTPError, URLError
    from urllib.request import Request

    normalize_location(url)  # policy check for http(s)
    if offline:
        raise ExternalError(f"{shown(url)}: offline mode allows only the cache and file/directory indexes")
    headers = {"User-Agent": USER_AGENT}
    if accept:
        headers["Accept"] = accept
    last = "no attempt"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(0.25 * 2 ** (attempt - 1), 4.0))
        out.seek(0)
        out.truncate()
        with _Exchange(deadline) as exchange:
            try:
                request = Request(url, headers=headers)
                with _opener(exchange).open(request, timeout=timeout) as response:
                    _read_bounded(response, out, url, max_bytes, exchange)
                    return
            except HTTPError as exc:
                exc.close()
                if exc.code < 500 and exc.code not in (408, 429):
                    raise ExternalError(f"{shown(url)}: HTTP {exc.code} {shown(exc.reason)}") from None
                last = f"HTTP {exc.code}"
            except (URLError, HTTPException, _Retryable, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(exc).__name__}: {shown(reason) or 'connection closed'}"
            if exchange.expired:
                last = f"no complete answer within {deadline:g} s"
    raise ExternalError(f"{shown(url)}: failed after {retries + 1} attempts ({last})")


def get_bytes(url: str, **kwargs: Any) -> bytes:
    """The whole answer in memory (pages and variants files; bounded by ``max_bytes``)."""
    buffer = io.BytesIO()
    fetch_to(url, buffer, **kwargs)
    return buffer.getvalue()


# ------------------------------------------------------------------ verified cache
def hashlib_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_of_handle(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return _sha256_of_handle(handle)


PUBLISH_LOCK_WAIT = 600.0


@contextlib.contextmanager
def file_lock(path: Path, wait_s: float = PUBLISH_LOCK_WAIT) -> Iterator[None]:
    """An exclusive lock between processes (fcntl) on ``path``, waited for at most ``wait_s``: for a
    directory the caller owns (a published index). The cache's locks are ``CacheDir.lock``'s."""
    from selector_backend.files.private_cache import flock_until, lock_holder

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        if not flock_until(handle.fileno(), time.monotonic() + wait_s):
            raise ExternalError(
                f"waited {wait_s:g} s for the lock {path}, held by {lock_holder(handle.fileno())}; "
                "let it finish (or stop it) and try again"
            )
        yield  # closing the file releases the lock


WHEELS_DIRECTORY = "wheels"  # wheels/<sha256>/<file name>: verified files
LOCKS_DIRECTORY = "locks"  # locks/<sha256>.lock: one per file, held while it is fetched
PART_PREFIX, PART_SUFFIX = ".download-", ".part"


def is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _is_part(name: str) -> bool:
    return name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX)


def sweep_stale_parts(wheels: CacheDir, locks: CacheDir) -> int:
    """Remove the temporary files of killed downloads; each under its file's lock, never a live one."""
    removed = 0
    for name, info in wheels.entries():
        if not stat.S_ISDIR(info.st_mode) or not is_sha256(name):
            continue
        try:
            directory = wheels.child(name, create=False)
        except (OSError, InputError):
            continue
        if directory is None:
            continue
        with directory:
            parts = [part for part, _ in directory.entries() if _is_part(part)]
            if not parts:
                continue
            with locks.try_lock(f"{name}.lock") as free:
                if not free:
                    continue  # a download of this file is running now
                removed += sum(directory.remove(part) for part in parts)
                wheels.remove(name)  # only when empty
    return removed


def cached_download(
    url: str,
    sha256: str,
    filename: str,
    cache_dir: Path,
    *,
    offline: bool = False,
    max_bytes: int = MAX_WHEEL_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DOWNLOAD_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    check: Callable[[Path], None] | None = None,
    lock_wait: float | None = None,
) -> Path:
    """The verified file for (url, sha256): from the cache, or downloaded, verified and then cached.

    Only a file whose sha256 matches ever appears at the cache path; a wheel
    must also be a safe archive (``wheelcheck``) and pass ``check`` (the
    caller's own test, e.g. its variant.json) before it is cached. A cached
    file that ``check`` refuses is removed: nothing refused stays. Another
    install fetching the same file is waited for at most ``lock_wait`` seconds
    (default: as long as that install's download may take, every retry included).
    """
    if not isinstance(sha256, str) or not isinstance(filename, str):
        raise InputError(f"{shown(url)}: the index gives no valid sha256 or file name; refusing to download")
    sha256 = sha256.lower()
    if not is_sha256(sha256):
        raise InputError(f"{shown(url)}: index gives no valid sha256 ({sha256!r}); refusing to download")
    if "/" in filename or "\\" in filename or "\0" in filename or filename.startswith(".") or not filename:
        raise InputError(f"{shown(url)}: unsafe file name {filename!r}")
    if lock_wait is None:
        lock_wait = deadline * (retries + 1) + 4.0 * retries  # the holder's attempts and back-offs

    def download(out: IO[bytes]) -> None:
        fetch_to(url, out, max_bytes=max_bytes, timeout=timeout, deadline=deadline, retries=retries, offline=offline)

    with open_required(cache_dir) as root, contextlib.ExitStack() as stack:
        try:
            locks = stack.enter_context(_child(root, LOCKS_DIRECTORY, private=True))
            wheels = stack.enter_context(_child(root, WHEELS_DIRECTORY))
            sweep_stale_parts(wheels, locks)
            stack.enter_context(locks.lock(f"{sha256}.lock", lock_wait))
            with _child(wheels, sha256) as directory:
                try:
                    return _cached_locked(url, sha256, filename, directory, check, download)
                finally:
                    wheels.remove(sha256)  # only succeeds when empty (a failed first download)
        except OSError as exc:
            raise cache_unusable(cache_dir, exc) from None


def _child(parent: CacheDir, name: str, private: bool = False) -> CacheDir:
    child = parent.child(name, create=True, private=private)
    assert child is not None
    return child


def _cached_locked(
    url: str,
    sha256: str,
    filename: str,
    directory: CacheDir,
    check: Callable[[Path], None] | None,
    download: Callable[[IO[bytes]], None],
) -> Path:
    """The file from ``directory`` (``wheels/<sha256>/``, its lock held) if it is there and good,
    else downloaded into a temporary file there, verified, checked and renamed into place."""
    fd = directory.open_file(filename)
    if fd is not None:
        with os.fdopen(fd, "rb") as handle:
            good = _sha256_of_handle(handle) == sha256
        if good:
            _check(directory, filename, check)
            return directory.path / filename
    directory.remove(filename)  # corrupted (disk error, tampering), or not a file of ours: fetch again
    for stale, _ in directory.entries():
        if _is_part(stale):
            directory.remove(stale)  # a killed download of this very file (we hold its lock)
    fd, part = directory.new_file(PART_PREFIX, PART_SUFFIX)
    try:
        with os.fdopen(fd, "w+b") as handle:
            download(handle)
            handle.flush()
            os.fsync(handle.fileno())
            handle.seek(0)
            actual = _sha256_of_handle(handle)
        if actual != sha256:
            raise IntegrityError(
                f"sha256 mismatch for {shown(url)}: the index says {sha256}, the file is {actual}; "
                "refusing it (nothing was installed or cached)"
            )
        if filename.endswith(".whl"):
            from selector_backend.install.wheelcheck import check_wheel

            check_wheel(directory.path / part, filename)
        _check(directory, part, check)
        directory.rename(part, filename)
    finally:
        directory.remove(part)  # gone already when it was renamed into place
    return directory.path / filename


def _check(directory: CacheDir, name: str, check: Callable[[Path], None] | None) -> None:
    """Run the caller's ``check`` on a file of the cache; a file it refuses is removed."""
    if check is None:
        return
    try:
        check(directory.path / name)
    except BaseException:
        directory.remove(name)
        raise


def copy_verified(source: Path, sha256: str, dest: Path) -> Path:
    """Copy a verified file to ``dest`` atomically, re-checking the hash of what was copied."""
    import shutil
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copyfile(source, tmp)
        if sha256_of(tmp) != sha256:
            raise IntegrityError(f"{source}: changed while being copied; refusing it")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
