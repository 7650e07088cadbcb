"""The parsed-page cache of a variant index (``install.index_cache``): a second read of the same page
bytes is served without parsing and equals a fresh parse; a changed page, a damaged or foreign cache
file, or a page the cache cannot stand for is never served from it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.synthetic_index import write_index
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.files import private_cache
from selector_backend.install import index_cache, variant_index

VARIANTS = 12  # x 4 Python tags: 48 wheels


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(None)


@pytest.fixture
def index(tmp_path: Path, catalog: Catalog) -> Path:
    simple, _ = write_index(tmp_path / "index", catalog, VARIANTS)
    return simple


def page_of(simple: Path) -> Path:
    return simple / "hvd-selector" / "index.json"


def plain(groups: list[variant_index.IndexGroup]) -> list[tuple[Any, ...]]:
    """Groups as plain data, the variant by its pairs: what two reads must agree on."""
    return [(g.version, g.label, g.variant.pairs(), [tuple(f) for f in g.files]) for g in groups]


def read(simple: Path, catalog: Catalog, cache: Path | None, **options: Any) -> list[variant_index.IndexGroup]:
    return variant_index.read_index_groups(simple.as_uri(), catalog, cache_dir=cache, **options)


def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, parsing a page fails the test: an answer must come from the cache."""

    def refuse(*args: Any) -> Any:
        raise AssertionError("the page was parsed again")

    monkeypatch.setattr(variant_index, "parse_project_page", refuse)


def test_second_read_is_served_from_the_cache_and_equals_a_fresh_parse(
    index: Path, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    fresh = plain(read(index, catalog, None))
    assert len(fresh) == VARIANTS and sum(len(g[3]) for g in fresh) == 4 * VARIANTS
    assert plain(read(index, catalog, cache)) == fresh
    (entry,) = index_cache.entries(cache)
    assert entry.stat().st_mode & 0o077 == 0  # the user's own
    no_parsing(monkeypatch)
    kept = read(index, catalog, cache)
    assert plain(kept) == fresh


def test_a_cached_variant_behaves_as_a_parsed_one(index: Path, catalog: Catalog, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    parsed = read(index, catalog, cache)
    kept = read(index, catalog, cache)
    for one, other in zip(parsed, kept, strict=True):
        assert one.variant == other.variant and hash(one.variant) == hash(other.variant)
        assert dict(one.variant) == dict(other.variant) and one.variant.to_json() == other.variant.to_json()
        assert {one.variant: 1}[other.variant] == 1


def test_a_changed_page_is_never_served_stale(
    index: Path, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    before = read(index, catalog, cache)
    page = json.loads(page_of(index).read_text())
    page["files"] = [f for f in page["files"] if "-cp310-" not in f["filename"]]  # a release drops cp310
    page_of(index).write_text(json.dumps(page))
    after = read(index, catalog, cache)
    assert sum(len(g.files) for g in after) == 3 * VARIANTS < sum(len(g.files) for g in before)
    assert plain(after) == plain(read(index, catalog, None))
    assert len(index_cache.entries(cache)) == 1  # the page's one entry, replaced
    no_parsing(monkeypatch)
    assert plain(read(index, catalog, cache)) == plain(after)


def test_a_page_that_does_not_pin_its_variants_file_is_not_kept(index: Path, catalog: Catalog, tmp_path: Path) -> None:
    page = json.loads(page_of(index).read_text())
    for item in page["files"]:
        if item["filename"].endswith("-variants.json"):
            item["hashes"] = {}  # the variants file could change under an unchanged page
    page_of(index).write_text(json.dumps(page))
    cache = tmp_path / "cache"
    assert len(read(index, catalog, cache)) == VARIANTS
    assert index_cache.entries(cache) == []


def test_a_read_that_warned_is_not_kept(
    index: Path, catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = json.loads(page_of(index).read_text())
    page["files"][0]["hashes"] = {}  # one wheel without a sha256: skipped, with a warning
    page_of(index).write_text(json.dumps(page))
    cache = tmp_path / "cache"
    for _ in range(2):
        assert sum(len(g.files) for g in read(index, catalog, cache)) == 4 * VARIANTS - 1
        assert "gives no sha256 for this wheel" in capsys.readouterr().err  # said on every read
    assert index_cache.entries(cache) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),  # cut short
        lambda p: p.write_bytes(b"\0" * 64),  # zeroes
        lambda p: p.write_bytes(b"not marshal at all"),
        lambda p: p.chmod(0o666),  # anyone may write it: not trusted
    ],
    ids=["truncated", "zeroes", "garbage", "world-writable"],
)
def test_a_damaged_or_foreign_cache_file_is_a_miss_then_rewritten(
    index: Path, catalog: Catalog, tmp_path: Path, damage: Any
) -> None:
    cache = tmp_path / "cache"
    fresh = plain(read(index, catalog, cache))
    (entry,) = index_cache.entries(cache)
    damage(entry)
    assert plain(read(index, catalog, cache)) == fresh
    (entry,) = index_cache.entries(cache)
    assert entry.stat().st_mode & 0o077 == 0
    key = index_cache.page_key(variant_index.project_url(index.as_uri(), catalog.name), "json", catalog, ())
    assert index_cache.load(cache, key, page_of(index).read_bytes()) is not None


def test_the_key_covers_link_policy_catalog_axes_and_release(index: Path, catalog: Catalog) -> None:
    url = variant_index.project_url(index.as_uri(), catalog.name)
    base = index_cache.page_key(url, "json", catalog, ())
    assert index_cache.page_key(url, "json", catalog, ("https://files.example",)) != base
    assert index_cache.page_key(url + "x/", "json", catalog, ()) != base
    assert index_cache.page_key(url, "html", catalog, ()) != base
    axes = dict(catalog.axes)
    target = axes["target"]
    axes["target"] = target._replace(values=(*target.values, "made_up_target"))
    assert index_cache.page_key(url, "json", catalog._replace(axes=axes), ()) != base
    assert index_cache.page_key(url, "json", catalog._replace(version="99.0"), ()) != base
    assert index_cache.page_key(url, "json", catalog, ()) == base


def test_an_unwritable_cache_costs_only_the_parse(index: Path, catalog: Catalog, tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    assert plain(read(index, catalog, blocker)) == plain(read(index, catalog, None))


def test_only_the_newest_pages_are_kept(catalog: Catalog, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    written: list[Path] = []  # each page's entry, oldest first
    for number in range(index_cache.KEEP + 2):
        simple, _ = write_index(tmp_path / f"index{number}", catalog, 2)
        seen = set(index_cache.entries(cache))
        read(simple, catalog, cache)
        new = set(index_cache.entries(cache)) - seen
        assert len(new) == 1, f"page {number} was not kept"
        entry = new.pop()
        os.utime(entry, (1000 + number, 1000 + number))  # mtimes apart, whatever the clock's resolution
        written.append(entry)
    assert index_cache.entries(cache) == sorted(written[2:])


def test_a_killed_writers_temporary_file_is_swept(index: Path, catalog: Catalog, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pages = cache / index_cache.DIRECTORY
    pages.mkdir(parents=True)
    abandoned, in_flight = pages / f".{'d' * 32}.marshal.1-x1.tmp", pages / f".{'e' * 32}.marshal.2-x2.tmp"
    other = pages / ".notes.txt.1-x3.tmp"  # not a temporary file of a page: never removed
    for item in (abandoned, in_flight, other):
        item.write_bytes(b"half a page")
    old = time.time() - private_cache.ABANDONED_S - 60
    os.utime(abandoned, (old, old))
    os.utime(other, (old, old))
    read(index, catalog, cache)
    assert not abandoned.exists()
    assert in_flight.exists()  # young: perhaps another process's write
    assert other.exists()
    assert len(index_cache.entries(cache)) == 1
