"""``-C variant-label=LABEL[:SHA256]``: a lock of one prebuilt binary, through the PEP 517 hooks in-process.

The same pin on every host that can run the wheel hands pip the very wheel the
index lists (its sha256 verified): every member byte for byte, plus the install
record the backend adds (``install/origin_record.py``); a host that cannot run it gets one line and exit 3, and
never another wheel or a source build. Hosts are given as the backend's own
host facts (``HVD_SELECTOR_TARGET``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.engine.reinstall import ORIGIN_FILE
from selector_backend.engine.variant import variant_label
from selector_backend.install import backend
from selector_backend.publishing import publish
from tests.ci.wheelfiles import write_wheel

ROOT = Path(__file__).resolve().parents[2]
V4 = "target=x86_64_v4 tensor_ops=gloo controllers=gloo"
V3 = "target=x86_64_v3 tensor_ops=gloo controllers=gloo"


@pytest.fixture(autouse=True)
def project_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    for name in list(os.environ):
        if name.startswith("HVD_SELECTOR"):
            monkeypatch.delenv(name)
    (tmp_path / "no-config.toml").write_text("")
    monkeypatch.setenv("HVD_SELECTOR_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("HVD_SELECTOR_MPI", "none")
    backend._pyproject.cache_clear()


def _wheel(directory: Path, text: str, catalog: Catalog) -> Path:
    """A small wheel with both variant records the backend checks (what the build writes)."""
    variant = catalog.parse_variant(text, fill_defaults=True)
    doc = variant_json.dumps(variant, catalog).encode()
    dist = f"hvd_selector-{catalog.version}"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    metadata = f"Metadata-Version: 2.1\nName: hvd-selector\nVersion: {catalog.version}\n"
    wheel = f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}-{tag}-linux_x86_64\n"
    files = {
        "hvd_selector/__init__.py": f"# {variant_label(variant)}\n".encode(),
        "hvd_selector/variant.json": doc,
        f"{dist}.dist-info/METADATA": metadata.encode(),
        f"{dist}.dist-info/WHEEL": wheel.encode(),
        f"{dist}.dist-info/variant.json": doc,
    }
    return write_wheel(directory / f"{dist}-{tag}-{tag}-linux_x86_64.whl", files)


@pytest.fixture()
def index(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, str]]]:
    """A published index with the v3 and v4 builds; text -> (label, sha256)."""
    catalog = load_catalog()
    wheels = {text: _wheel(tmp_path / "in" / str(i), text, catalog) for i, text in enumerate((V3, V4))}
    publish.publish(list(wheels.values()), tmp_path / "site", catalog, progress=False)
    pins = {}
    for text, path in wheels.items():
        info = publish.inspect_wheel(path, catalog)
        pins[text] = (info.label, info.sha256)
    return tmp_path / "site", pins


def _install(site: Path, pin: str, out: Path, monkeypatch: pytest.MonkeyPatch, target: str, cache: Path) -> Path:
    monkeypatch.setenv("HVD_SELECTOR_TARGET", target)
    monkeypatch.setenv("HVD_SELECTOR_CACHE_DIR", str(cache))
    settings = {"index-url": (site / "simple").as_uri(), "variant-label": pin}
    assert backend.get_requires_for_build_wheel(settings) == [], "a pinned prebuilt asks for no build toolchain"
    out.mkdir()
    return out / backend.build_wheel(str(out), settings)


def test_a_pin_made_on_a_v4_host_installs_the_same_bytes_wherever_they_run(
    index: tuple[Path, dict[str, tuple[str, str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, pins = index
    label, sha256 = pins[V4]
    (published,) = (p for p in site.rglob(f"*-{label}.whl") if hashlib.sha256(p.read_bytes()).hexdigest() == sha256)
    for n, host in enumerate(("x86_64_v4", "sapphirerapids", "zen4")):
        wheel = _install(site, f"{label}:{sha256}", tmp_path / f"out{n}", monkeypatch, host, tmp_path / f"c{n}")
        assert_pinned_wheel(wheel, published, host)
    # the sha256 in upper case pins the same bytes (pip accepts hashes in either case too)
    wheel = _install(site, f"{label}:{sha256.upper()}", tmp_path / "upper", monkeypatch, "x86_64_v4", tmp_path / "cu")
    assert_pinned_wheel(wheel, published, "upper-case sha256")
    # a label alone pins the variant; the index's sha256 still verifies the download
    wheel = _install(site, label, tmp_path / "plain", monkeypatch, "x86_64_v4", tmp_path / "c-plain")
    assert_pinned_wheel(wheel, published, "label only")


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def assert_pinned_wheel(wheel: Path, published: Path, host: str) -> None:
    """``wheel`` is the published file's members, byte for byte, plus the install record (and its RECORD row)."""
    got, want = members(wheel), members(published)
    assert hashlib.sha256(published.read_bytes()).hexdigest() != hashlib.sha256(wheel.read_bytes()).hexdigest()
    record = next(name for name in want if name.endswith(".dist-info/RECORD"))
    origin = record.replace("RECORD", ORIGIN_FILE)
    assert set(got) == set(want) | {origin}, host
    assert {n: b for n, b in got.items() if n not in (record, origin)} == {
        n: b for n, b in want.items() if n != record
    }, host
    added = set(got[record].decode().splitlines()) - set(want[record].decode().splitlines())
    assert [row.split(",")[0] for row in added] == [origin], host


@pytest.mark.parametrize(
    ("host", "pin", "says"),
    [
        ("x86_64_v3", "V4", "cannot run here"),  # the v4 build on a v3 CPU: never the v3 wheel instead
        ("x86_64_v4", "V4:" + "0" * 64, "has no wheel labelled"),  # other bytes under the label
        ("x86_64_v4", "deadbeef", "has no wheel labelled deadbeef"),
        ("x86_64_v4", "Not A Label", "is not LABEL or LABEL:SHA256"),
    ],
)
def test_a_pin_that_cannot_be_honoured_is_one_line_and_exit_3(
    index: tuple[Path, dict[str, tuple[str, str]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    host: str,
    pin: str,
    says: str,
) -> None:
    site, pins = index
    pin = pin.replace("V4", pins[V4][0])
    monkeypatch.setenv("HVD_SELECTOR_TARGET", host)
    monkeypatch.setenv("HVD_SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as excinfo:
        backend.get_requires_for_build_wheel({"index-url": (site / "simple").as_uri(), "variant-label": pin})
    assert excinfo.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
