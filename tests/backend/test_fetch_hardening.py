"""Issue 12 at the fetch layer: local files that are not files, stale partial downloads, lying zips."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from selector_backend.errors import ExternalError, InputError, IntegrityError
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
    with fetch.file_lock(cache / "locks" / f"{'b' * 64}.lock"):  # a download of b is running
        assert fetch.sweep_stale_parts(cache) == 1
    assert not stale.exists() and not stale.parent.exists()
    assert live.exists()


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
