"""The fetch layer against a real misbehaving HTTP server on loopback."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import zipfile
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.install import fetch


def _zip_payload() -> bytes:
    """A 1 MiB wheel-shaped zip (cached .whl files must be safe archives)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("blob/data.bin", bytes(range(256)) * 4096)
    return buffer.getvalue()


PAYLOAD = _zip_payload()


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    (root / "blob.whl").write_bytes(PAYLOAD)
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock")


@pytest.mark.parametrize(
    "location",
    ["ftp://example.org/simple", "http://example.org/simple", "http://10.0.0.1/simple", "gopher://x"],
)
def test_url_policy_refuses_non_loopback_http_and_other_schemes(location: str) -> None:
    with pytest.raises(InputError):
        fetch.normalize_location(location)


@pytest.mark.parametrize(
    "location", ["http://127.0.0.1:9/simple", "http://localhost/x", "http://[::1]:8/x", "https://example.org/simple"]
)
def test_url_policy_allows_https_and_loopback_http(location: str) -> None:
    assert fetch.normalize_location(location) == location


def test_directory_becomes_file_url(tmp_path: Path) -> None:
    assert fetch.normalize_location(str(tmp_path)) == tmp_path.resolve().as_uri()


def test_retries_5xx_then_succeeds(site: Path) -> None:
    with serve(site) as server:
        server.queue("/blob.whl", "500", "500")
        data = fetch.get_bytes(f"{server.url}/blob.whl", retries=3, timeout=5, max_bytes=2 << 20)
        assert data == PAYLOAD
        assert server.count("/blob.whl") == 3


def test_gives_up_after_retries_with_clear_error(site: Path) -> None:
    with serve(site) as server:
        server.queue("/blob.whl", *["500"] * 5)
        with pytest.raises(ExternalError, match=r"failed after 3 attempts \(HTTP 500\)"):
            fetch.get_bytes(f"{server.url}/blob.whl", retries=2, timeout=5, max_bytes=2 << 20)
        assert server.count("/blob.whl") == 3


def test_404_is_not_retried(site: Path) -> None:
    with serve(site) as server:
        server.queue("/blob.whl", "404")
        with pytest.raises(ExternalError, match="HTTP 404"):
            fetch.get_bytes(f"{server.url}/blob.whl", retries=3, timeout=5, max_bytes=2 << 20)
        assert server.count("/blob.whl") == 1


def test_hang_is_bounded_by_timeout_and_retried(site: Path) -> None:
    with serve(site) as server:
        server.hang_seconds = 2.0
        server.queue("/blob.whl", "hang")
        data = fetch.get_bytes(f"{server.url}/blob.whl", retries=1, timeout=0.5, max_bytes=2 << 20)
        assert data == PAYLOAD


def test_cut_body_is_retried(site: Path) -> None:
    with serve(site) as server:
        server.queue("/blob.whl", "cut")
        assert fetch.get_bytes(f"{server.url}/blob.whl", retries=2, timeout=5, max_bytes=2 << 20) == PAYLOAD
        assert server.count("/blob.whl") == 2


def test_size_bound_is_enforced(site: Path) -> None:
    with serve(site) as server, pytest.raises(ExternalError, match="limit"):
        fetch.get_bytes(f"{server.url}/blob.whl", max_bytes=1000)


def test_offline_refuses_network(site: Path) -> None:
    with serve(site) as server, pytest.raises(ExternalError, match="offline"):
        fetch.get_bytes(f"{server.url}/blob.whl", offline=True)


def test_cached_download_verifies_and_caches(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve(site) as server:
        path = fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5)
        assert path.read_bytes() == PAYLOAD
        again = fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5)
        assert again == path
        assert server.count("/blob.whl") == 1  # the second call is served from the cache


def test_tampered_download_fails_closed_and_caches_nothing(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve(site) as server:
        server.queue("/blob.whl", "tamper")
        with pytest.raises(IntegrityError, match="sha256 mismatch"):
            fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5)
    assert cache_files(cache) == []


def test_failed_downloads_leave_no_partial_file(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve(site) as server:
        server.queue("/blob.whl", "cut", "cut", "cut")
        with pytest.raises(ExternalError):
            fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5, retries=2)
    assert cache_files(cache) == []


def test_corrupted_cache_entry_is_replaced(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve(site) as server:
        path = fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5)
        path.write_bytes(b"bit rot")
        again = fetch.cached_download(f"{server.url}/blob.whl", sha(PAYLOAD), "blob.whl", cache, timeout=5)
        assert again.read_bytes() == PAYLOAD
        assert server.count("/blob.whl") == 2


def test_missing_or_bad_hash_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="sha256"):
        fetch.cached_download("http://127.0.0.1:9/x.whl", "abc", "x.whl", tmp_path)


def _download(args: tuple[str, str, str]) -> str:
    url, digest, cache = args
    return str(fetch.cached_download(url, digest, "blob.whl", Path(cache), timeout=10))


def test_concurrent_processes_share_one_cache(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve(site) as server:
        args = [(f"{server.url}/blob.whl", sha(PAYLOAD), str(cache))] * 8
        with multiprocessing.get_context("spawn").Pool(8) as pool:
            paths = pool.map(_download, args)
        assert len(set(paths)) == 1
        assert Path(paths[0]).read_bytes() == PAYLOAD
        assert server.count("/blob.whl") == 1  # the lock made seven of them wait and reuse
    assert [p.name for p in cache_files(cache)] == ["blob.whl"]
