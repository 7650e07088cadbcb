"""Issues 12 and 27 at the fetch layer: local files that are not files, stale partial downloads, lying
zips, the cache's locks and links, refused files."""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import stat
import time
import zipfile
from pathlib import Path

import pytest

from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.files.private_cache import CacheDir, CacheLockTimeout, UntrustedCacheError
from selector_backend.install import fetch, wheelcheck


@pytest.mark.timeout(20)
def test_a_fifo_or_device_is_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(ExternalError, match=r"not a regular file|cannot read"):
            fetch.get_bytes(path.as_uri())


@pytest.mark.parametrize(
    ("index", "link", "ok"),
    [
        ("file:///srv/index/p/", "file:///srv/index/p/x.whl", True),
        ("file:///srv/index/p/", "http://127.0.0.1:8/x.whl", False),
        ("http://127.0.0.1:8/simple/p/", "http://127.0.0.1:8/files/x.whl", True),
        ("http://127.0.0.1:8/simple/p/", "http://127.0.0.1:80/x.whl", False),
        ("http://127.0.0.1/simple/p/", "http://127.0.0.1:80/x.whl", True),  # default port is the same origin
        ("https://idx.example.org/simple/p/", "http://idx.example.org/x.whl", False),
        ("https://idx.example.org/simple/p/", "file:///etc/hostname", False),
        ("https://idx.example.org/simple/p/", "https://cdn.example.org/x.whl", False),
        ("https://idx.example.org/simple/p/", "data:,hello", False),
    ],
)
def test_check_link(index: str, link: str, ok: bool) -> None:
    if ok:
        assert fetch.check_link(index, link) == link
    else:
        with pytest.raises(IntegrityError):
            fetch.check_link(index, link)


def test_allow_list_admits_exactly_its_origins() -> None:
    allowed = fetch.parse_origins(["https://cdn.example.org"])
    index = "https://idx.example.org/simple/p/"
    assert fetch.check_link(index, "https://cdn.example.org/a/x.whl", allowed)
    with pytest.raises(IntegrityError):
        fetch.check_link(index, "https://cdn.example.org:8443/x.whl", allowed)
    with pytest.raises(InputError):
        fetch.parse_origins(["https://cdn.example.org/path"])


def test_stale_part_files_are_swept_but_live_ones_kept(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    stale = cache / "wheels" / ("a" * 64) / ".download-dead.part"
    live = cache / "wheels" / ("b" * 64) / ".download-live.part"
    for path in (stale, live):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * 1000)
    with (
        CacheDir.open(cache, create=False) as root,
        _child(root, "wheels") as wheels,
        _child(root, "locks") as locks,
        locks.lock(f"{'b' * 64}.lock", 1),  # a download of b is running
    ):
        assert fetch.sweep_stale_parts(wheels, locks) == 1
    assert not stale.exists() and not stale.parent.exists()
    assert live.exists()


def _child(root: CacheDir | None, name: str) -> CacheDir:
    assert root is not None
    child = root.child(name, create=True)
    assert child is not None
    return child


# ------------------------------------------------------------------ issue 27: locks, links, refused files
WHEEL_BYTES = b"PK not a wheel: a .bin is only hashed"


def _site(tmp_path: Path) -> tuple[str, str]:
    """A file:// index holding one blob: (its URL, its sha256)."""
    blob = tmp_path / "site" / "blob.bin"
    blob.parent.mkdir()
    blob.write_bytes(WHEEL_BYTES)
    return blob.as_uri(), hashlib.sha256(WHEEL_BYTES).hexdigest()


def test_a_held_lock_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    """Another process of this user holding the file's lock: the wait ends with one line naming the lock
    and the holder (before, the wait had no end)."""
    url, digest = _site(tmp_path)
    cache = tmp_path / "cache"
    with CacheDir.open(cache, create=True) as root, _child(root, "locks") as locks, locks.lock(f"{digest}.lock", 1):
        start = time.monotonic()
        with pytest.raises(CacheLockTimeout) as caught:
            fetch.cached_download(url, digest, "blob.bin", cache, lock_wait=0.5)
        assert time.monotonic() - start < 5
    message = str(caught.value)
    assert f"waited 0.5 s for the cache lock {cache / 'locks' / digest}.lock" in message
    assert f"held by process {os.getpid()}" in message
    assert fetch.cached_download(url, digest, "blob.bin", cache).read_bytes() == WHEEL_BYTES  # released: fine


def test_an_old_world_readable_lock_is_replaced_and_its_holder_ignored(tmp_path: Path) -> None:
    """Earlier releases left 0644 lock files in 0755 directories, which any user could open and hold.
    A holder of such a file (here: this process, through another descriptor) no longer blocks."""
    url, digest = _site(tmp_path)
    cache = tmp_path / "cache"
    locks = cache / "locks"
    locks.mkdir(parents=True, mode=0o755)
    locks.chmod(0o755)
    lock = locks / f"{digest}.lock"
    lock.write_text("")
    lock.chmod(0o644)
    with lock.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert fetch.cached_download(url, digest, "blob.bin", cache, lock_wait=2).read_bytes() == WHEEL_BYTES
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700


def test_a_refused_file_is_not_cached_and_a_cached_one_refused_later_is_removed(tmp_path: Path) -> None:
    """``check`` (the backend's variant.json check) refuses after the hash matched: nothing stays."""
    url, digest = _site(tmp_path)
    cache = tmp_path / "cache"

    def refuse(path: Path) -> None:
        assert path.read_bytes() == WHEEL_BYTES  # it sees the verified bytes
        raise IntegrityError(f"{path.name}: refused")

    with pytest.raises(IntegrityError, match="refused"):
        fetch.cached_download(url, digest, "blob.bin", cache, check=refuse)
    assert [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock"] == []
    cached = fetch.cached_download(url, digest, "blob.bin", cache)  # cached without a check
    with pytest.raises(IntegrityError, match="refused"):
        fetch.cached_download(url, digest, "blob.bin", cache, check=refuse)
    assert not cached.exists()


@pytest.mark.parametrize("name", ["wheels", "locks"])
def test_a_link_in_the_cache_is_refused_and_not_followed(tmp_path: Path, name: str) -> None:
    url, digest = _site(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / name).symlink_to(elsewhere)
    with pytest.raises(UntrustedCacheError, match=rf"{cache / name} is a symbolic link, not a directory"):
        fetch.cached_download(url, digest, "blob.bin", cache)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_dir_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    url, digest = _site(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(UntrustedCacheError, match=rf"cache-dir {cache} is writable by .* \(mode 0{mode:o}\)"):
        fetch.cached_download(url, digest, "blob.bin", cache)
    assert list(cache.iterdir()) == []


def test_a_users_own_link_to_a_cache_elsewhere_is_followed(tmp_path: Path) -> None:
    """A cache moved to a larger disk and linked back: the link is the user's, its target checked."""
    url, digest = _site(tmp_path)
    real = tmp_path / "scratch" / "cache"
    real.mkdir(parents=True, mode=0o700)
    link = tmp_path / "cache"
    link.symlink_to(real)
    assert fetch.cached_download(url, digest, "blob.bin", link).read_bytes() == WHEEL_BYTES
    assert list(real.glob("wheels/*/blob.bin"))


def test_new_cache_directories_are_private(tmp_path: Path) -> None:
    url, digest = _site(tmp_path)
    cache = tmp_path / "new" / "cache"
    fetch.cached_download(url, digest, "blob.bin", cache)
    for directory in (cache, cache / "wheels", cache / "wheels" / digest, cache / "locks"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE((cache / "locks" / f"{digest}.lock").stat().st_mode) == 0o600


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_lying_size_header_does_not_inflate_the_read(tmp_path: Path) -> None:
    """The central directory claims 10 bytes; the data inflates to 8 MiB. The read stops at the limit."""
    data = bytearray(_zip({"x.dist-info/variant.json": b" " * (8 << 20)}))
    true_size = (8 << 20).to_bytes(4, "little")
    small = (10).to_bytes(4, "little")
    data = bytearray(bytes(data).replace(true_size, small))  # local header and central directory
    path = tmp_path / "liar.whl"
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo("x.dist-info/variant.json").file_size == 10
        with pytest.raises(IntegrityError):
            wheelcheck.read_member(archive, "x.dist-info/variant.json", limit=1 << 20)


def test_not_a_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.whl"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(IntegrityError, match="not a readable wheel"):
        wheelcheck.check_wheel(path)


@pytest.mark.parametrize(
    ("name", "why"),
    [("../a", "'..'"), ("a/../../b", "'..'"), ("/etc/x", "absolute"), ("\\x", "absolute"), ("C:x", "absolute")],
)
def test_unsafe_member_names(name: str, why: str) -> None:
    assert why in (wheelcheck.unsafe_member(name) or "")
    assert wheelcheck.unsafe_member("pkg/a..b/c.py") is None
