"""Reading a variant index: a PEP 503/691 simple index plus ``{name}-{version}-variants.json``.

This is the reader the PEP 517 backend and ``resolve --index-url`` use; the
publisher (``selector_backend.publishing.publish``) writes what this reads. A location
is the index root as pip takes it (``https://host/simple``), a ``file://``
URL or a directory. For each labelled wheel the variant comes from the
version's variants.json (label -> namespace -> feature -> values); a wheel
without a label, or whose label the variants.json does not define, is
skipped. Both index-file spellings are read: the PEP 825 one
(``hvd_selector-0.1.0-variants.json``, the wheel filename's normalised
name) and earlier releases' ``hvd-selector-0.1.0-variants.json`` with their
v0.0.3 shape (``variant_json.is_legacy``). Fetching goes through ``selector_backend.install.fetch`` (URL policy,
retries, size bounds).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.resolve import Candidate
from selector_backend.engine.variant import Variant
from selector_backend.engine.wheelname import split_wheel_name
from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.files.safeparse import only_chars
from selector_backend.install import fetch, index_cache
from selector_backend.install.index_groups import IndexGroup

if TYPE_CHECKING:
    from selector_backend.settings import Settings

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class IndexFile(NamedTuple):
    filename: str
    url: str
    sha256: str | None


def normalize_project(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_url(location: str, project: str) -> str:
    base = fetch.normalize_location(location)
    return base.rstrip("/") + f"/{normalize_project(project)}/"


def _page(url: str, options: dict[str, Any]) -> tuple[str, bytes]:
    """(kind, body) of a project page; directories may hold index.json or index.html."""
    if url.startswith("file:"):
        for name, kind in (("index.json", "json"), ("index.html", "html")):
            try:
                return kind, fetch.get_bytes(url + name, **options)
            except ExternalError:
                continue
        raise ExternalError(f"{url}: no index.json or index.html (is this a variant index?)")
    body = fetch.get_bytes(url, accept=JSON_ACCEPT, **options)
    return ("json" if body.lstrip().startswith(b"{") else "html"), body


_HEX = b"0123456789abcdefABCDEF"
_PLAIN_NAME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+!-"


def _join(page_url: str, href: str) -> str:
    """urljoin, with a fast path for the common case: a bare file name beside the page."""
    if page_url.endswith("/") and href and only_chars(href, _PLAIN_NAME_CHARS) and href not in (".", ".."):
        return page_url + href
    try:
        return urllib.parse.urljoin(page_url, href)
    except ValueError as exc:
        raise ExternalError(f"{page_url}: bad link {fetch.shown(href)!r} ({exc})") from None


def _json_file_entry(item: Any, index: int, page_url: str) -> IndexFile:
    """One ``files[]`` entry of a PEP 691 page, every field's type checked."""
    where = f"{page_url}: files[{index}]"
    if not isinstance(item, dict):
        raise ExternalError(f"{where} is not an object")
    filename, url, hashes = item.get("filename"), item.get("url"), item.get("hashes", {})
    if not isinstance(filename, str) or not filename:
        raise ExternalError(f"{where}.filename is not a non-empty string")
    if not isinstance(url, str) or not url:
        raise ExternalError(f"{where}.url is not a non-empty string")
    if not isinstance(hashes, dict):
        raise ExternalError(f"{where}.hashes is not an object")
    sha = hashes.get("sha256")
    if sha is not None and not _is_sha256(sha):
        raise ExternalError(f"{where}.hashes.sha256 is not 64 hex digits")
    return IndexFile(filename, _join(page_url, url), sha)


_NO_HASHES: dict[str, Any] = {}


def _json_files(items: list[Any], page_url: str) -> list[IndexFile] | None:
    """``_json_file_entry`` for every entry at once, each check a pass over the whole page; None
    when any fails (then the entry-by-entry check names it). Links that are bare file names
    beside the page (what publishers write) are joined without urljoin."""
    if not items or set(map(type, items)) != {dict}:
        return None
    names = [item.get("filename") for item in items]
    hrefs = [item.get("url") for item in items]
    hashes = [item.get("hashes", _NO_HASHES) for item in items]
    if set(map(type, names)) != {str} or set(map(type, hrefs)) != {str} or "" in names or "" in hrefs:
        return None
    if set(map(type, hashes)) != {dict}:
        return None
    shas = [h.get("sha256") for h in hashes]
    given = [sha for sha in shas if sha is not None]
    if given and not (
        set(map(type, given)) == {str} and set(map(len, given)) == {64} and only_chars("".join(given), _HEX)
    ):
        return None
    if page_url.endswith("/") and only_chars("".join(hrefs), _PLAIN_NAME_CHARS) and {".", ".."}.isdisjoint(hrefs):
        urls = [page_url + href for href in hrefs]
    else:
        urls = [_join(page_url, href) for href in hrefs]
    new = tuple.__new__  # IndexFile(...) without its Python-level __new__, ten thousand times
    return [new(IndexFile, entry) for entry in zip(names, urls, shas, strict=True)]


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{64}", value) is not None


def parse_project_page(kind: str, body: bytes, page_url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON or PEP 503 HTML project page; anything malformed is an ExternalError."""
    from selector_backend.files.safeparse import loads

    if kind == "json":
        data = loads(body, f"{page_url}: PEP 691 page", ExternalError)
        items = data.get("files") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ExternalError(f"{page_url}: malformed PEP 691 page ('files' is not a list)")
        return _json_files(items, page_url) or [_json_file_entry(item, i, page_url) for i, item in enumerate(items)]
    files: list[IndexFile] = []
    try:
        hrefs = _anchors(body.decode("utf-8", errors="replace"))
    except (ValueError, AssertionError, RecursionError) as exc:  # html.parser's own complaints
        raise ExternalError(f"{page_url}: malformed PEP 503 page ({exc})") from None
    for href in hrefs:
        url, _, fragment = _join(page_url, href).partition("#")
        filename = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        files.append(IndexFile(filename, url, sha if _is_sha256(sha) else None))
    return files


def _anchors(text: str) -> list[str]:
    """The ``href`` of every ``<a>`` of a PEP 503 page (html.parser is loaded for HTML pages only)."""
    import html.parser

    class Anchors(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.hrefs: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "a":
                href = dict(attrs).get("href")
                if href:
                    self.hrefs.append(href)

    parser = Anchors()
    parser.feed(text)
    parser.close()
    return parser.hrefs


def _variants_document(raw: bytes, url: str) -> tuple[bool, dict[str, dict[str, Any]]]:
    """(legacy shape?, label -> namespace -> features) of a ``*-variants.json``, every level's type checked."""
    from selector_backend.files.safeparse import loads

    data = loads(raw, f"{url}: variants file", ExternalError)
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, dict):
        raise ExternalError(f"{url}: malformed variants file ('variants' is not an object)")
    out = variants if _well_typed(variants) else _checked_variants(variants, url)
    try:  # after the entries' types: a malformed entry is named before a missing schema
        legacy = variant_json.is_legacy(data)
    except InputError as exc:
        raise ExternalError(f"{url}: {exc}") from None
    return legacy, out


def _well_typed(variants: dict[str, Any]) -> bool:
    """Every label maps namespaces to features whose values are a string or a list of strings
    (``check_features``), checked in one pass; False sends the document to the entry-by-entry check."""
    try:
        kinds = {
            type(value)
            for namespaces in variants.values()
            for features in namespaces.values()
            for values in features.values()
            for value in (values if type(values) is list else (values,))
        }
    except AttributeError:  # a level that is not an object
        return False
    return kinds <= {str}


def _checked_variants(variants: dict[str, Any], url: str) -> dict[str, dict[str, Any]]:
    """The entry-by-entry check: the first malformed entry is named."""
    from selector_backend.engine.variant_json import check_features

    out: dict[str, dict[str, Any]] = {}
    for label, namespaces in variants.items():
        if not isinstance(namespaces, dict):
            raise ExternalError(f"{url}: variant {label!r} is not an object of namespaces")
        for namespace, features in namespaces.items():
            try:
                check_features(features, f"{url}: variant {label!r} namespace {namespace!r}")
            except InputError as exc:
                raise ExternalError(str(exc)) from None
        out[label] = namespaces
    return out


def _variants_maps(
    files: list[IndexFile], catalog: Catalog, options: dict[str, Any], check_link: Callable[[str], str]
) -> tuple[dict[str, tuple[bool, dict[str, Any]]], bool]:
    """(version -> (legacy shape?, {label: properties}) from every ``*-variants.json`` listed (links
    checked first), whether the page pins every one of them by sha256)."""
    out: dict[str, tuple[bool, dict[str, Any]]] = {}
    pinned = True
    for item in files:
        if not item.filename.endswith("-variants.json"):
            continue
        match = re.fullmatch(r"(.+?)-([^-]+)-variants\.json", item.filename)
        if not match or normalize_project(match.group(1)) != normalize_project(catalog.name):
            continue
        raw = fetch.get_bytes(check_link(item.url), **options)
        if item.sha256 and fetch.hashlib_sha256(raw) != item.sha256.lower():
            raise IntegrityError(f"sha256 mismatch for {item.url}; refusing the variants file")
        pinned = pinned and item.sha256 is not None
        legacy, variants = _variants_document(raw, item.url)
        if match.group(2) in out and out[match.group(2)][0] is False:
            continue  # both spellings listed: the current one wins
        out[match.group(2)] = (legacy, variants)
    return out, pinned


def read_index_groups(
    location: str,
    catalog: Catalog,
    *,
    allowed_origins: tuple[str, ...] = (),
    cache_dir: Path | None = None,
    **options: Any,
) -> list[IndexGroup]:
    """The variant wheels of ``catalog.name`` on the index at ``location``, one group per
    (version, label) in order of first listing.

    ``options`` are passed to ``fetch.get_bytes`` (offline, timeout, retries).
    Every link must stay on the index's origin (or ``allowed_origins``):
    ``fetch.check_link``. A wheel is dropped on string checks of its name
    (another project, no label, a version or label the variants file does
    not define) before anything is built for it; each label's variant is
    parsed once. With a ``cache_dir`` the result for these exact page bytes
    is kept and reused (``index_cache``).
    """
    url = project_url(location, catalog.name)
    kind, body = _page(url, options)
    if cache_dir is None:
        return _read_groups(url, kind, body, catalog, allowed_origins, options)[0]
    key = index_cache.page_key(url, kind, catalog, allowed_origins)
    kept = index_cache.load(cache_dir, key, body)
    if kept is not None:
        return kept
    groups, repeatable = _read_groups(url, kind, body, catalog, allowed_origins, options)
    if repeatable:
        index_cache.store(cache_dir, key, body, groups)
    return groups


def _read_groups(
    url: str, kind: str, body: bytes, catalog: Catalog, allowed_origins: tuple[str, ...], options: dict[str, Any]
) -> tuple[list[IndexGroup], bool]:
    """(read_index_groups' answer parsed from the page, whether a cached copy may stand for it: the
    page pins its variants files and no wheel was skipped with a warning)."""
    files = parse_project_page(kind, body, url)
    check = lambda link: fetch.check_link(url, link, allowed_origins)  # noqa: E731
    maps, repeatable = _variants_maps(files, catalog, options, check)
    project = normalize_project(catalog.name)
    ours: dict[str, bool] = {}  # a wheel name's spelling -> is it this project
    groups: dict[tuple[str, str], IndexGroup] = {}
    unknown: set[tuple[str, str]] = set()  # (version, label) the variants files do not define
    memo: variant_json.FeatureMemo = {}
    # check_link's verdict depends on the link's scheme and host alone, both inside its first three
    # '/'-separated parts; links under the page's own URL share the page's, checked once
    allowed: set[tuple[str, ...]] = set()
    for position, (filename, link, sha256) in enumerate(files):
        fields = split_wheel_name(filename)
        if fields is None:
            continue
        name, version, _, python, abi, platform, label = fields
        if label is None:
            continue
        mine = ours.get(name)
        if mine is None:
            mine = ours[name] = normalize_project(name) == project
        if not mine:
            continue
        key = (version, label)
        group = groups.get(key)
        if group is None:
            if key in unknown:
                continue
            legacy, labels = maps.get(version, (False, {}))
            props = labels.get(label)
            if props is None:
                unknown.add(key)
                continue
            group = groups[key] = IndexGroup(version, label, _variant_of(props, label, catalog, url, legacy, memo), [])
        if not sha256:
            from selector_backend.install.console import warn

            repeatable = False
            warn(
                f"{fetch.shown(filename)}: the index gives no sha256 for this wheel; "
                "skipping it (the others are still used)"
            )
            continue
        where = ("page",) if link.startswith(url) else tuple(link.split("/", 3)[:3])
        if where not in allowed:
            fetch.check_link(url, link, allowed_origins)  # raises for a link the index may not send us to
            allowed.add(where)
        group.files.append((position, filename, link, sha256.lower(), f"{python}-{abi}-{platform}"))
    return [group for group in groups.values() if group.files], repeatable


def _variant_of(
    props: Any, label: str, catalog: Catalog, url: str, legacy: bool, memo: variant_json.FeatureMemo
) -> Variant:
    """The variant a variants.json entry describes (one label's properties, current or v0.0.3 shape)."""
    try:
        return variant_json.variant_of(label, props, catalog, legacy=legacy, memo=memo)
    except InputError as exc:
        raise ExternalError(f"{url}: {exc}") from None


def index_candidates(
    urls: Iterable[str], catalog: Catalog, host: HostProfile, settings: Settings
) -> Iterator[Candidate]:
    """Every variant of every configured variant index, with its wheels as the candidate's files.

    A wheel's file carries its wheel-tag finding (one per distinct tag) and
    its order: index order (first index first), then tag preference. Wheels
    that are not variant wheels of this catalog are skipped.
    """
    from selector_backend.engine.resolve import CandidateFile
    from selector_backend.engine.wheel_tags import check_wheel_tags, ranked_host_tags

    ranked_tags = ranked_host_tags(host)
    verdicts: dict[str, tuple[tuple[Finding, ...], int]] = {}  # one per distinct python-abi-platform tag
    listed = 0  # files of earlier indexes: positions run on across indexes
    new = tuple.__new__  # CandidateFile(...) without its Python-level __new__, once a wheel
    for number, url in enumerate(urls):
        groups = read_index_groups(
            url,
            catalog,
            allowed_origins=settings.index_file_origins,
            cache_dir=settings.cache_dir,
            **settings.fetch_options(),
        )
        base = number * 10**9
        for group in groups:
            for tag in {file[4] for file in group.files}.difference(verdicts):
                finding, rank = check_wheel_tags(tag, host, ranked_tags)
                verdicts[tag] = ((finding,), rank)
            files = tuple(
                [
                    new(CandidateFile, (filename, link, sha256, verdicts[tag][0], base + verdicts[tag][1], listed + at))
                    for at, filename, link, sha256, tag in group.files
                ]
            )
            yield Candidate(group.variant, "index", {"label": group.label, "index": url}, files=files)
        listed += 1 + max((group.files[-1][0] for group in groups), default=-1)
