"""Fetching from the configured index only: URL policy, bounded retried GETs, verified cache.

Security rules (docs/reference/backend.md): https for anything not on
loopback; plain http only to 127.0.0.0/8 / ::1 / localhost; ``file:`` and
plain directories for local indexes; redirects never leave the host they
started on; every downloaded file is checked against the index's sha256
before anything uses it, and a mismatch fails closed. The cache is shared
safely between concurrent installs: one lock per file, downloads land in a
temporary file and are renamed into place only once verified.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ExternalError, InputError, IntegrityError

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_WHEEL_BYTES = 2 * 1024 * 1024 * 1024
USER_AGENT = "hvd-selector-backend"


# ------------------------------------------------------------------ URL policy
def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def normalize_location(location: str) -> str:
    """A URL for ``location`` (a directory path becomes file://); policy violations are InputErrors."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = Path(urllib.request.url2pathname(parsed.path) if parsed.scheme == "file" else location)
        return path.resolve().as_uri()
    if parsed.scheme == "https":
        return location
    if parsed.scheme == "http":
        if is_loopback(parsed.hostname):
            return location
        raise InputError(f"index {location}: plain http is allowed only on loopback; use https://")
    raise InputError(f"index {location}: unsupported scheme {parsed.scheme!r}; use https://, file:// or a path")


def same_origin(a: str, b: str) -> bool:
    pa, pb = urllib.parse.urlparse(a), urllib.parse.urlparse(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


class _NoForeignRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if not same_origin(req.full_url, newurl):
            raise ExternalError(f"{req.full_url} redirects to another host ({newurl}); refusing")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_NoForeignRedirects())


# ------------------------------------------------------------------ GET with retries
class _Retryable(Exception):
    pass


def _read_bounded(response: IO[bytes], out: IO[bytes], url: str, max_bytes: int) -> int:
    length = response.headers.get("Content-Length") if hasattr(response, "headers") else None
    if length is not None and int(length) > max_bytes:
        raise ExternalError(f"{url}: {length} bytes is over the {max_bytes}-byte limit")
    total = 0
    while True:
        chunk = response.read(1 << 20)
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise ExternalError(f"{url}: more than the {max_bytes}-byte limit")
        out.write(chunk)
    if length is not None and total != int(length):
        raise _Retryable(f"body cut short ({total} of {length} bytes)")
    return total


def fetch_to(
    url: str,
    out: IO[bytes],
    *,
    accept: str | None = None,
    max_bytes: int = MAX_PAGE_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    offline: bool = False,
) -> None:
    """Copy ``url`` into ``out``: retried on 5xx, timeouts, resets and short bodies."""
    url = normalize_location(url) if "://" not in url else url
    scheme = urllib.parse.urlparse(url).scheme
    if scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
        try:
            with path.open("rb") as handle:
                _read_bounded(handle, out, url, max_bytes)
        except OSError as exc:
            raise ExternalError(f"{path}: cannot read ({exc.strerror or exc})") from None
        return
    normalize_location(url)  # policy check for http(s)
    if offline:
        raise ExternalError(f"{url}: offline mode allows only the cache and file/directory indexes")
    headers = {"User-Agent": USER_AGENT}
    if accept:
        headers["Accept"] = accept
    last = "no attempt"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(0.25 * 2 ** (attempt - 1), 4.0))
        out.seek(0)
        out.truncate()
        try:
            with _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
                _read_bounded(response, out, url, max_bytes)
                return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code not in (408, 429):
                raise ExternalError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, _Retryable, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"{type(exc).__name__}: {reason}"
    raise ExternalError(f"{url}: failed after {retries + 1} attempts ({last})")


def get_bytes(url: str, **kwargs: Any) -> bytes:
    with tempfile.TemporaryFile() as buffer:
        fetch_to(url, buffer, **kwargs)
        buffer.seek(0)
        return buffer.read()


# ------------------------------------------------------------------ verified cache
def hashlib_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (fcntl), released on exit."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def cached_download(
    url: str,
    sha256: str,
    filename: str,
    cache_dir: Path,
    *,
    offline: bool = False,
    max_bytes: int = MAX_WHEEL_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
) -> Path:
    """The verified file for (url, sha256): from the cache, or downloaded, verified and then cached.

    Only a file whose sha256 matches ever appears at the cache path.
    """
    sha256 = sha256.lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise InputError(f"{url}: index gives no valid sha256 ({sha256!r}); refusing to download")
    if "/" in filename or filename.startswith("."):
        raise InputError(f"{url}: unsafe file name {filename!r}")
    final = cache_dir / "wheels" / sha256 / filename
    with file_lock(cache_dir / "locks" / f"{sha256}.lock"):
        if final.exists():
            if sha256_of(final) == sha256:
                return final
            final.unlink()  # a corrupted cache entry (disk error, tampering): fetch again
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=".download-", suffix=".part")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "w+b") as handle:
                fetch_to(url, handle, max_bytes=max_bytes, timeout=timeout, retries=retries, offline=offline)
                handle.flush()
                os.fsync(handle.fileno())
            actual = sha256_of(tmp)
            if actual != sha256:
                raise IntegrityError(
                    f"sha256 mismatch for {url}: the index says {sha256}, the file is {actual}; "
                    "refusing it (nothing was installed or cached)"
                )
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                final.parent.rmdir()  # only succeeds when empty (a failed first download)
    return final


def copy_verified(source: Path, sha256: str, dest: Path) -> Path:
    """Copy a verified file to ``dest`` atomically, re-checking the hash of what was copied."""
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
