"""Issue 36 item 2: a zip whose directory lists (or claims) far more members than any wheel is refused
from its end record, before zipfile parses the directory; tars are bounded as they are read.

The zips are crafted directly: one local header and the same 47-byte central directory entry repeated,
so a directory of 800,000 members costs 38 MB of disk and no compression work.
"""

from __future__ import annotations

import io
import re
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.files import archives
from selector_backend.install import wheelcheck

from .backend_helpers import REPO

NAME = b"a"
LOCAL = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(NAME), 0) + NAME
ENTRY = struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0, len(NAME), *[0] * 6) + NAME
BOMB_MEMBERS = 800_000  # 38 MB of directory: over both the member and the directory-size limits


def crafted_zip(path: Path, members: int, *, claimed: int | None = None, zip64: bool = True) -> Path:
    """A zip of ``members`` central directory entries whose end record claims ``claimed`` (default: the truth)."""
    claimed = members if claimed is None else claimed
    size = len(ENTRY) * members
    with path.open("wb") as out:
        out.write(LOCAL)
        out.write(ENTRY * members)
        if zip64:
            out.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, claimed, claimed, size, len(LOCAL)))
            out.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, len(LOCAL) + size, 1))
            out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        else:
            count = min(claimed, 0xFFFF)
            out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, size, len(LOCAL), 0))
    return path


CHECK_IN_A_PROCESS = """
import sys
from pathlib import Path
from selector_backend.errors import IntegrityError
from selector_backend.install.wheelcheck import check_wheel
try:
    check_wheel(Path(sys.argv[1]), "hvd_selector-0.1.0-py3-none-linux_x86_64.whl")
    print("accepted")
except IntegrityError as exc:
    print(exc)
# VmHWM, this process image's own peak: getrusage's ru_maxrss keeps the peak of the image exec replaced,
# which is the forking test runner's, so it grew with the tests that ran before this one
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""

#: The check of a small wheel peaks near 30 MiB (the interpreter and the backend's imports); parsing the
#: 800,000-member directory took 300 MiB and 29 s before it could be refused. A bound far above normal.
RSS_BOUND_KIB = 150 << 10


@pytest.mark.parametrize(
    ("claimed", "zip64", "refusal"),
    [
        (None, True, rf"lists {BOMB_MEMBERS} members, over the 100000 limit"),  # the zip64 record's true count
        (3, False, r"its zip directory is \d+ bytes, over the \d+ limit"),  # a record that lies about the count
    ],
)
def test_a_zip_directory_bomb_is_refused_from_its_end_record_in_bounded_memory(
    tmp_path: Path, claimed: int | None, zip64: bool, refusal: str
) -> None:
    bomb = crafted_zip(tmp_path / "bomb.whl", BOMB_MEMBERS, claimed=claimed, zip64=zip64)
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_IN_A_PROCESS, str(bomb)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    message, peak_kib = proc.stdout.splitlines()
    assert message.startswith("hvd_selector-0.1.0-py3-none-linux_x86_64.whl: its zip directory "), message
    assert re.search(refusal, message), message
    assert message.endswith("refusing the wheel"), message
    assert int(peak_kib) < RSS_BOUND_KIB, f"peak RSS {int(peak_kib) >> 10} MiB checking the bomb"


def test_a_lying_count_under_the_size_limit_is_caught_by_walking_the_directory(tmp_path: Path) -> None:
    """The end record claims 10 members; the directory (7 MB, under its size limit) holds 150,000."""
    bomb = crafted_zip(tmp_path / "liar.whl", 150_000, claimed=10, zip64=False)
    with pytest.raises(IntegrityError, match=r"liar\.whl: its zip directory holds over 100000 members \(its end "):
        archives.check_zip(bomb, bomb.name)


def test_the_end_record_is_read_as_zipfile_reads_it(tmp_path: Path) -> None:
    """A zip64 directory of 70,000 members passes, and zipfile sees the count the end record gave; a
    zip with a comment after its end record passes too."""
    path = crafted_zip(tmp_path / "big.zip", 70_000)
    with path.open("rb") as handle:
        directory = archives.zip_directory(handle)
    assert directory == archives.ZipDirectory(70_000, 70_000 * len(ENTRY), len(LOCAL), True)
    with archives.open_zip(path) as archive:
        assert len(archive.infolist()) == 70_000
    commented = tmp_path / "commented.zip"
    with zipfile.ZipFile(commented, "w") as archive:
        archive.writestr("x.txt", b"x")
        archive.comment = b"a comment after the end record"
    with archives.open_zip(commented) as archive:
        assert archive.namelist() == ["x.txt"]


@pytest.mark.parametrize(
    "data", [b"", b"PK\x05\x06", b"not a zip at all" * 100, b"PK\x03\x04" + b"\0" * 40 + b"PK\x05\x06" + b"\xff" * 18]
)
def test_a_broken_end_record_is_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "broken.whl"
    path.write_bytes(data)
    with pytest.raises(IntegrityError, match=r"^broken\.whl: not a readable wheel \(.*\); refusing it$"):
        wheelcheck.check_wheel(path)


def test_publish_refuses_a_bomb_as_bad_input(tmp_path: Path) -> None:
    """The publisher opens the maintainer's wheels through the same check (InputError, exit 2)."""
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.publishing.publish import inspect_wheel

    bomb = crafted_zip(tmp_path / "hvd_selector-0.1.0-py3-none-linux_x86_64.whl", 150_000, claimed=10, zip64=False)
    with pytest.raises(InputError, match="holds over 100000 members"):
        inspect_wheel(bomb, load_catalog())


def _tar(path: Path, members: int, size: int = 1) -> Path:
    with tarfile.open(path, "w:gz") as out:
        for i in range(members):
            info = tarfile.TarInfo(f"p/{i}")
            info.size = size
            out.addfile(info, io.BytesIO(b"x" * size))
    return path


def test_a_tar_is_bounded_as_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _tar(tmp_path / "good.tar.gz", 3)
    assert [(m.name, data) for m, data in archives.read_tar(good)] == [(f"p/{i}", b"x") for i in range(3)]
    monkeypatch.setattr(archives, "MAX_MEMBERS", 2)
    with pytest.raises(IntegrityError, match=r"good\.tar\.gz: more than 2 members; refusing it"):
        archives.read_tar(good)
    monkeypatch.setattr(archives, "MAX_MEMBERS", 10)
    monkeypatch.setattr(archives, "MAX_TAR_BYTES", 2)
    with pytest.raises(ExternalError, match=r"its files hold over 2 bytes"):
        archives.read_tar(good, error=ExternalError)
    (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(IntegrityError, match=r"bad\.tar\.gz: not a readable tar\.gz"):
        archives.read_tar(tmp_path / "bad.tar.gz")


def test_the_crafted_entry_is_what_zipfile_reads() -> None:
    """The test's own zip is valid to zipfile (a control for the refusals above)."""
    buffer = io.BytesIO()
    buffer.write(LOCAL + ENTRY * 2)
    buffer.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 2, 2, 2 * len(ENTRY), len(LOCAL), 0))
    with zipfile.ZipFile(buffer) as archive:
        assert [i.filename for i in archive.infolist()] == ["a", "a"]
