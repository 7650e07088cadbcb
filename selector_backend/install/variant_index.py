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

import html.parser
import re
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.variant import Variant
from selector_backend.engine.wheelname import WheelName, parse_wheel_name
from selector_backend.errors import ExternalError, InputError, IntegrityError
from selector_backend.install import fetch

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class IndexFile(NamedTuple):
    filename: str
    url: str
    sha256: str | None


class IndexEntry(NamedTuple):
    """A variant wheel listed on an index."""

    filename: str
    url: str
    sha256: str
    label: str
    variant: Variant
    wheel: WheelName


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


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


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.+!-]+")


def _join(page_url: str, href: str) -> str:
    """urljoin, with a fast path for the common case: a bare file name beside the page."""
    if page_url.endswith("/") and _PLAIN_NAME.fullmatch(href) and href not in (".", ".."):
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
        return [_json_file_entry(item, i, page_url) for i, item in enumerate(items)]
    files: list[IndexFile] = []
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
    except (ValueError, AssertionError, RecursionError) as exc:  # html.parser's own complaints
        raise ExternalError(f"{page_url}: malformed PEP 503 page ({exc})") from None
    for href in parser.hrefs:
        url, _, fragment = _join(page_url, href).partition("#")
        filename = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        files.append(IndexFile(filename, url, sha if _is_sha256(sha) else None))
    return files


def _variants_document(raw: bytes, url: str) -> tuple[bool, dict[str, dict[str, Any]]]:
    """(legacy shape?, label -> namespace -> features) of a ``*-variants.json``, every level's type checked."""
    from selector_backend.engine.variant_json import check_features
    from selector_backend.files.safeparse import loads

    data = loads(raw, f"{url}: variants file", ExternalError)
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, dict):
        raise ExternalError(f"{url}: malformed variants file ('variants' is not an object)")
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
    try:  # after the entries' types: a malformed entry is named before a missing schema
        legacy = variant_json.is_legacy(data)
    except InputError as exc:
        raise ExternalError(f"{url}: {exc}") from None
    return legacy, out


def _variants_maps(
    files: list[IndexFile], catalog: Catalog, options: dict[str, Any], check_link: Callable[[str], str]
) -> dict[str, tuple[bool, dict[str, Any]]]:
    """version -> (legacy shape?, {label: properties}) from every ``*-variants.json`` listed (links checked first)."""
    out: dict[str, tuple[bool, dict[str, Any]]] = {}
    for item in files:
        match = re.fullmatch(r"(.+?)-([^-]+)-variants\.json", item.filename)
        if not match or normalize_project(match.group(1)) != normalize_project(catalog.name):
            continue
        raw = fetch.get_bytes(check_link(item.url), **options)
        if item.sha256 and fetch.hashlib_sha256(raw) != item.sha256.lower():
            raise IntegrityError(f"sha256 mismatch for {item.url}; refusing the variants file")
        legacy, variants = _variants_document(raw, item.url)
        if match.group(2) in out and out[match.group(2)][0] is False:
            continue  # both spellings listed: the current one wins
        out[match.group(2)] = (legacy, variants)
    return out


def read_index(
    location: str, catalog: Catalog, *, allowed_origins: tuple[str, ...] = (), **options: Any
) -> Iterator[IndexEntry]:
    """The variant wheels of ``catalog.name`` on the index at ``location``.

    ``options`` are passed to ``fetch.get_bytes`` (offline, timeout, retries).
    Every link must stay on the index's origin (or ``allowed_origins``):
    ``fetch.check_link``.
    """
    url = project_url(location, catalog.name)
    kind, body = _page(url, options)
    files = parse_project_page(kind, body, url)
    maps = _variants_maps(files, catalog, options, lambda link: fetch.check_link(url, link, allowed_origins))
    project = normalize_project(catalog.name)
    parsed: dict[tuple[str, str], Variant] = {}  # (version, label) -> variant: parsed once, shared by its wheels
    # check_link's verdict depends on the link's scheme and host alone, both inside its first three
    # '/'-separated parts; a part already let through is not parsed again for each of its wheels
    allowed: set[tuple[str, ...]] = set()
    for item in files:
        if not item.filename.endswith(".whl"):
            continue
        try:
            wheel = parse_wheel_name(item.filename)
        except InputError:
            continue
        if wheel.label is None or normalize_project(wheel.name) != project:
            continue
        key = (wheel.version, wheel.label)
        variant = parsed.get(key)
        if variant is None:
            legacy, labels = maps.get(wheel.version, (False, {}))
            props = labels.get(wheel.label)
            if props is None:
                continue
            variant = parsed[key] = _variant_of(props, wheel.label, catalog, url, legacy)
        if not item.sha256:
            from selector_backend.install.console import warn

            warn(
                f"{fetch.shown(item.filename)}: the index gives no sha256 for this wheel; "
                "skipping it (the others are still used)"
            )
            continue
        where = tuple(item.url.split("/", 3)[:3])
        if where not in allowed:
            fetch.check_link(url, item.url, allowed_origins)  # raises for a link the index may not send us to
            allowed.add(where)
        yield IndexEntry(item.filename, item.url, item.sha256.lower(), wheel.label, variant, wheel)


def _variant_of(props: Any, label: str, catalog: Catalog, url: str, legacy: bool) -> Variant:
    """The variant a variants.json entry describes (one label's properties, current or v0.0.3 shape)."""
    try:
        return variant_json.variant_of(label, props, catalog, legacy=legacy)
    except InputError as exc:
        raise ExternalError(f"{url}: {exc}") from None
