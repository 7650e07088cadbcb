"""Build-cache listings: the real cache pages, Spack's v2/v3 indexes, and malformed input."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from selector_backend.cli.main import main
from selector_backend.errors import InputError
from selector_backend.interop.spack.listing import load_listing

from .spack_hosts import DATA, DATED, DEVELOP


def test_real_listings_load():
    develop = load_listing(DEVELOP)
    dated = load_listing(DATED)
    assert (develop.package, len(develop.entries)) == ("py-horovod", 48)
    assert (dated.package, len(dated.entries)) == ("py-horovod", 6)
    first = dated.entries[0].spec
    # the dated listing writes controllers:=mpi; it means controllers=mpi
    assert first.variant("controllers") == ("mpi",) and first.variant("cuda_arch") == ("80",)
    assert {e.spec.os for e in dated.entries} == {"sequoia", "ubuntu22.04", "ubuntu24.04"}
    assert dated.entries[1].stacks == ("ml-darwin-aarch64-mps", "root")


def test_v2_index_json_and_v3_manifest(tmp_path):
    v2 = load_listing(DATA / "build_cache" / "index.json", "py-horovod")
    assert v2.format == "index.json (database v7)" and len(v2.entries) == 3
    cuda = next(e for e in v2.entries if e.spec.variant("cuda") is True)
    assert cuda.spec.dependency("cuda").version == "12.4.1" and cuda.spec.compiler == "gcc@=11.4.0"
    v3 = load_listing(DATA / "mirror-v3", "py-horovod")
    assert v3.format == "index.manifest.json v3 (database v8)" and len(v3.entries) == 2
    # spec format v5 records the compiler as a c/cxx dependency
    assert {e.spec.compiler for e in v3.entries} == {"gcc@=13.2.0"}
    assert load_listing(DATA / "mirror-v3" / "v3" / "manifests" / "index" / "index.manifest.json", "py-horovod") == v3
    # only py-horovod nodes are listed; other packages of the cache are not
    assert {e.spec.name for e in v3.entries} == {"py-horovod"}


def test_v3_blob_checksum_is_verified(tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(DATA / "mirror-v3", mirror)
    blob = next((mirror / "blobs").rglob("*"), None)
    blob = next(p for p in (mirror / "blobs").rglob("*") if p.is_file())
    blob.write_bytes(blob.read_bytes().replace(b'"12.8.0"', b'"12.9.0"'))
    with pytest.raises(InputError, match="does not match the manifest"):
        load_listing(mirror, "py-horovod")
    assert hashlib.sha256(blob.read_bytes()).hexdigest() != blob.name


def _edit(tmp_path, text, name="bad.listing"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _details(path):
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("spec_details:"))
    return json.loads(line.partition(":")[2])


def _with_details(details):
    head = DATED.read_text().split("spec_details:")[0]
    return head + "spec_details: " + json.dumps(details) + "\n---\n"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: [{k: v for k, v in d[0].items() if k != "os"}, *d[1:]],
            r"spec_details\[0\] \(hash bnzpgqks2klljyo73725vzstbqllzntb\): missing field os",
        ),
        (
            lambda d: [d[0], {**d[1], "variants": [*d[1]["variants"], "?odd"]}],
            r"spec_details\[1\] \(hash c2wozwfzntnwpmpr6cfez6njs7dp2uc7\): variant '\?odd' is not",
        ),
        (
            lambda d: [d[0], {**d[1], "variants": [*d[1]["variants"], "cuda_arch="]}],
            r"spec_details\[1\] .*variant 'cuda_arch=' has no value",
        ),
        (lambda d: [d[0], {**d[1], "variants": "+cuda"}], r"spec_details\[1\] .*variants must be a list"),
        (lambda d: [{**d[0], "versions": []}], r"spec_details\[0\] .*versions must be a non-empty list"),
        (lambda d: [{**d[0], "variants": [*d[0]["variants"], "+cuda"]}], r"variant cuda given twice"),
        (lambda d: ["not an object"], r"spec_details\[0\] is not a JSON object"),
    ],
)
def test_malformed_entries_name_the_spec(tmp_path, mutate, message):
    path = _edit(tmp_path, _with_details(mutate(_details(DATED))))
    with pytest.raises(InputError, match=message):
        load_listing(path)


def test_truncated_listing(tmp_path):
    text = DEVELOP.read_text()
    path = _edit(tmp_path, text[: len(text) // 2])
    with pytest.raises(InputError, match=r"spec_details is not valid JSON .*truncated"):
        load_listing(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"database": {"version": "8", "installs": {"abc": {"spec": {"name": "py-horovod"}}}}}',
            r"installs\[abc\]: spec is missing version",
        ),
        (
            '{"database": {"version": "8", "installs": {"abc": {"spec": {"name": "py-horovod", "version": "1",'
            ' "arch": {"platform": "linux", "platform_os": "ubuntu24.04", "target": "zen3"},'
            ' "parameters": {"cuda": 3}}}}}}',
            r"installs\[abc\]: parameters.cuda is 3",
        ),
        ('{"database": {"version": "8", "installs": ', r"not valid JSON .*truncated"),
        ('{"version": 3, "data": []}', r"no application/vnd.spack.db"),
        ('{"something": "else"}', r"not a Spack build-cache listing"),
    ],
)
def test_malformed_indexes(tmp_path, content, message):
    path = _edit(tmp_path, content, "index.json")
    with pytest.raises(InputError, match=message):
        load_listing(path, "py-horovod")


def test_cli_malformed_listing_exits_2_with_one_line(tmp_path, capsys):
    path = _edit(tmp_path, DEVELOP.read_text()[:5000])
    assert main(["spack", "pick", str(path), "-C", "target=zen3", "-C", "os=ubuntu24.04"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.listing" in err and "Traceback" not in err


def test_a_listing_over_what_the_parse_can_hold_is_one_line_and_exit_2(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 36: a 300 MB listing took 1.86 GB to parse (and 1 GiB, the old limit, could end in
    "internal error: MemoryError", exit 1). A listing over the limit is refused before it is read."""
    from selector_backend.cli.main import main
    from selector_backend.interop.spack.listing import MAX_LISTING_BYTES

    big = tmp_path / "index.json"
    with big.open("wb") as out:
        out.truncate(200 << 20)  # sparse: nothing is written, nothing is read
    assert MAX_LISTING_BYTES * 7 <= 1 << 30  # parsed, a listing takes about 7 times its size
    assert main(["spack", "pick", str(big), "--package", "py-horovod"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "over the 128 MiB limit; refusing to read it" in err[0], err
