"""Issue 12: a hostile index on 127.0.0.1 against the real backend hook, one scenario per finding.

Each scenario runs ``get_requires_for_build_wheel`` in a fresh process from
the checkout (as pip does), with ``build-policy=never-build`` so no source
build can hide a failure, and checks: a non-zero exit, one clear last line,
no traceback, nothing in the cache but lock files, and an end well within
the deadline the settings give.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .backend_helpers import REPO, clean_env
from .hostile_index import (
    PROJECT,
    HostileIndex,
    drip,
    hostile_index,
    json_page,
    make_wheel,
    response,
    run_hook,
    sha256,
)

INDEX_TIMEOUT = 2.0
RETRIES = 1
# two attempts of at most INDEX_TIMEOUT each, one back-off, interpreter start-up and detection
DEADLINE = 2 * INDEX_TIMEOUT + 0.25 + 6.0


class Outcome:
    def __init__(self, proc: subprocess.CompletedProcess[str], seconds: float, cache: Path) -> None:
        self.rc = proc.returncode
        self.stderr = proc.stderr
        self.stdout = proc.stdout
        self.seconds = seconds
        self.cache = cache
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.last = lines[-1] if lines else ""

    def cached(self) -> list[str]:
        """Files in the cache, less lock files, the install's plan memo (``plan_reuse``: a decision, no data),
        parsed pages (``index_cache``: reused only for the same page bytes; test_index_cache.py) and the local
        catalog's parsed TOML (``catalog-memos``: nothing from the index)."""
        return sorted(
            str(p.relative_to(self.cache))
            for p in self.cache.rglob("*")
            if p.is_file()
            and p.suffix != ".lock"
            and p.relative_to(self.cache).parts[0] not in ("plans", "index-pages", "catalog-memos")
        )

    def assert_refused(self, pattern: str, rc: int = 4) -> None:
        import re

        detail = f"rc={self.rc} after {self.seconds:.1f}s\n{self.stderr[-3000:]}"
        assert self.rc == rc, detail
        assert "Traceback" not in self.stderr, detail
        assert self.last.startswith("hvd-selector: error: "), detail
        assert re.search(pattern, self.last), detail
        assert self.cached() == [], self.cached()
        assert self.seconds < DEADLINE, detail


@pytest.fixture()
def index() -> Iterator[HostileIndex]:
    with hostile_index() as server:
        yield server


@pytest.fixture()
def hook(tmp_path: Path, index: HostileIndex):  # type: ignore[no-untyped-def]
    cache = tmp_path / "cache"

    def run(**settings: str) -> Outcome:
        config = {
            "index-url": index.index_url,
            "build-policy": "never-build",
            "cache-dir": str(cache),
            "index-timeout": str(INDEX_TIMEOUT),
            "index-retries": str(RETRIES),
            "download-timeout": str(INDEX_TIMEOUT + 1),
            **settings,
        }
        env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "no-config"), PYTHONPATH=str(REPO))
        return Outcome(*run_hook(config, env, timeout=120), cache)

    return run


PAGE = f"/simple/{PROJECT}/"


def test_a_good_index_is_used(index: HostileIndex, hook) -> None:  # type: ignore[no-untyped-def]
    """The control: the same server with honest answers gives a verified, cached wheel."""
    name = index.publish(make_wheel())
    outcome = hook()
    assert outcome.rc == 0, outcome.stderr
    assert outcome.stdout.strip().endswith("[]")
    assert "selected prebuilt" in outcome.stderr
    assert [Path(p).name for p in outcome.cached()] == [name]


# ------------------------------------------------------------------ finding 3: local files and other origins
@pytest.mark.parametrize(
    "link",
    ["file:///etc/hostname", "file:///dev/zero", "file:///tmp/planted.whl", "http://127.0.0.2:9/x.whl"],
)
def test_links_off_the_index_origin_are_refused(index: HostileIndex, hook, link: str) -> None:  # type: ignore[no-untyped-def]
    name = index.publish(make_wheel())
    page = json.loads(index.routes[PAGE].split(b"\r\n\r\n", 1)[1])
    page["files"][0]["url"] = link
    index.routes[PAGE] = json_page(page["files"])
    outcome = hook()
    outcome.assert_refused(r"links to .*(own origin|another origin).*refusing")
    assert not any(name in r for r in index.requests[1:] if "variants" not in r)


def test_a_foreign_variants_file_is_not_fetched(index: HostileIndex, hook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    index.publish(make_wheel())
    page = json.loads(index.routes[PAGE].split(b"\r\n\r\n", 1)[1])
    page["files"][1]["url"] = fifo.as_uri()  # reading a FIFO would hang
    index.routes[PAGE] = json_page(page["files"])
    hook().assert_refused("only its own origin is allowed")


def test_an_allow_listed_origin_is_followed(index: HostileIndex, hook) -> None:  # type: ignore[no-untyped-def]
    """index-file-origins lets an index keep its files on another host (here: the same server as localhost)."""
    index.publish(make_wheel())
    page = json.loads(index.routes[PAGE].split(b"\r\n\r\n", 1)[1])
    port = index.url.rsplit(":", 1)[1]
    for item in page["files"]:
        item["url"] = f"http://localhost:{port}{PAGE}{item['url']}"
    index.routes[PAGE] = json_page(page["files"])
    hook().assert_refused("another origin")
    outcome = hook(**{"index-file-origins": f"http://localhost:{port}"})
    assert outcome.rc == 0, outcome.stderr


# ------------------------------------------------------------------ finding 4: whole-exchange deadline
@pytest.mark.parametrize("what", ["body", "headers"])
def test_a_dripping_server_cannot_hold_the_install(index: HostileIndex, hook, what: str) -> None:  # type: ignore[no-untyped-def]
    index.publish(make_wheel())
    whole = index.routes[PAGE]
    assert isinstance(whole, bytes)
    if what == "body":
        head, body = whole.split(b"\r\n\r\n", 1)
        index.routes[PAGE] = lambda conn: (conn.sendall(head + b"\r\n\r\n"), drip(body)(conn))  # type: ignore[func-returns-value]
    else:
        index.routes[PAGE] = drip(whole)
    outcome = hook()
    outcome.assert_refused(rf"no complete answer within {INDEX_TIMEOUT:g} s")


# ------------------------------------------------------------------ finding 5: malformed HTTP
MALFORMED_HTTP = {
    "bad content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\nConnection: close\r\n\r\n{}",
    "negative content-length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\nConnection: close\r\n\r\n{}",
    "bad status line": b"HTTP/1.1 abc\r\nConnection: close\r\n\r\n{}",
    "not http": b"\x00\x01garbage\r\n\r\n",
    "bad chunking": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "101 headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n{}",
    "huge header line": b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n{}",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HTTP))
def test_malformed_http_is_one_line(index: HostileIndex, hook, case: str) -> None:  # type: ignore[no-untyped-def]
    index.routes[PAGE] = MALFORMED_HTTP[case]
    hook().assert_refused(r"(malformed|failed after \d attempts)")


# ------------------------------------------------------------------ finding 5: hostile index data
def _listing(**change: object) -> list[dict[str, object]]:
    wheel = make_wheel()
    return [{"filename": "w.whl", "url": "w.whl", "hashes": {"sha256": sha256(wheel)}, **change}]


HOSTILE_PAGES = {
    "nested 500k deep": response(b'{"files": ' + b"[" * 500_000, content_type="application/vnd.pypi.simple.v1+json"),
    "not utf-8": response(b'{"files": "\xff\xfe"}', content_type="application/vnd.pypi.simple.v1+json"),
    "files not a list": json_page({"a": 1}),  # type: ignore[arg-type]
    "hashes a list": json_page(_listing(hashes=[])),
    "filename an int": json_page(_listing(filename=5)),
    "sha256 an int": json_page(_listing(hashes={"sha256": 5})),
    "url an object": json_page(_listing(url={"x": 1})),
    "entry a string": json_page(["w.whl"]),  # type: ignore[list-item]
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PAGES))
def test_hostile_page_data_is_one_line(index: HostileIndex, hook, case: str) -> None:  # type: ignore[no-untyped-def]
    index.routes[PAGE] = HOSTILE_PAGES[case]
    hook().assert_refused(r"(PEP 691|files\[0\]|not UTF-8|nested too deep)")


@pytest.mark.parametrize(
    "variants",
    [
        {"variants": {"LABEL": {"hvd_selector": {"target": [1]}}}},
        {"variants": {"LABEL": {"hvd_selector": {"target": {"a": "b"}}}}},
        {"variants": {"LABEL": ["x"]}},
        {"variants": []},
        [],
    ],
    ids=["target [1]", "target object", "namespaces a list", "variants a list", "top a list"],
)
def test_hostile_variants_file_is_one_line(index: HostileIndex, hook, variants: object) -> None:  # type: ignore[no-untyped-def]
    from .hostile_index import variant_document

    label, _ = variant_document()
    text = json.dumps(variants).replace("LABEL", label)
    index.publish(make_wheel(), variants=json.loads(text))
    hook().assert_refused(r"variants file|variant '")


@pytest.mark.parametrize("where", ["a file", "inside a file", "in /proc"])
def test_a_bad_cache_dir_is_one_line(index: HostileIndex, hook, tmp_path: Path, where: str) -> None:  # type: ignore[no-untyped-def]
    index.publish(make_wheel())
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    cache = {"a file": blocker, "inside a file": blocker / "cache", "in /proc": Path("/proc/version/cache")}[where]
    outcome = hook(**{"cache-dir": str(cache)})
    outcome.assert_refused(r"cache-dir .* is not a writable directory", rc=2)


# ------------------------------------------------------------------ finding 6: archives, metadata bombs, no sha256
@pytest.mark.parametrize("member", ["../escape.py", "/etc/evil.conf", "hvd_selector_stub/../../up.py", "C:/x.py"])
def test_a_wheel_escaping_its_directory_is_not_cached(index: HostileIndex, hook, member: str) -> None:  # type: ignore[no-untyped-def]
    index.publish(make_wheel({member: b"print('escaped')"}))
    hook().assert_refused(r"member .* has (a '\.\.' component|an absolute path); refusing the wheel")


def test_a_variant_json_bomb_is_refused_before_reading(index: HostileIndex, hook) -> None:  # type: ignore[no-untyped-def]
    index.publish(make_wheel(variant_json=b" " * (64 << 20)))  # 64 MiB of spaces deflates to ~64 KiB
    hook().assert_refused(r"variant\.json would inflate to \d+ bytes")


def test_a_wheel_without_sha256_is_reported_and_skipped(index: HostileIndex, hook) -> None:  # type: ignore[no-untyped-def]
    index.publish(make_wheel())
    page = json.loads(index.routes[PAGE].split(b"\r\n\r\n", 1)[1])
    del page["files"][0]["hashes"]
    index.routes[PAGE] = json_page(page["files"])
    outcome = hook()
    assert "warning:" in outcome.stderr and "gives no sha256 for this wheel; skipping it" in outcome.stderr
    outcome.assert_refused(r"none of the 0 prebuilt variants fits.*never-build", rc=3)


# ------------------------------------------------------------------ issue 27 finding 4: refused, so not kept
def test_a_wheel_whose_variant_json_is_refused_is_not_left_in_the_cache(index: HostileIndex, hook) -> None:  # type: ignore[no-untyped-def]
    """The sha256 matches, but the wheel's variant.json describes another variant than its label: it
    is refused, and (unlike before, 2.9 MB a time) not left in the cache."""
    from selector_backend.engine import variant_json
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    other = catalog.parse_variant("target=x86_64_v3 tensor_ops=gloo controllers=gloo", fill_defaults=True)
    name = index.publish(make_wheel(variant_json=json.dumps(variant_json.render(other, catalog)).encode()))
    outcome = hook()
    outcome.assert_refused(r"was built as .*target=x86_64_v3.*, not ")
    # issue 36: the line names the wheel, not the download's temporary .download-....part file
    assert outcome.last.startswith(f"hvd-selector: error: {name} was built as "), outcome.last


# ------------------------------------------------------------------ issue 36 item 2: a zip-directory bomb
def test_a_zip_directory_bomb_is_refused_from_its_end_record(index: HostileIndex, hook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A wheel (its sha256 correct) whose directory lists 800,000 members: refused from the end record, in
    one line, well within the deadline (before, the whole directory was parsed first)."""
    import re

    from .test_archives import BOMB_MEMBERS, crafted_zip

    name = index.publish(crafted_zip(tmp_path / "bomb.whl", BOMB_MEMBERS).read_bytes())
    hook().assert_refused(
        rf"{re.escape(name)}: its zip directory lists {BOMB_MEMBERS} members, over the 100000 limit; "
        "refusing the wheel$"
    )
