"""Reading a variant index: a PEP 503/691 simple index plus ``{name}-{version}-variants.json``.

This is the reader the PEP 517 backend and ``resolve --index-url`` use; the
publisher (``selector_backend.publish``) writes what this reads. A location
is the index root as pip takes it (``https://host/simple``), a ``file://``
URL or a directory. For each labelled wheel the variant comes from the
version's variants.json (label -> namespace -> feature -> values); a wheel
without a label, or whose label the variants.json does not define, is
skipped. Both index-file spellings are read: the PEP 825 one
(``hvd_selector-0.1.0-variants.json``, the wheel filename's normalised
name) and earlier releases' ``hvd-selector-0.1.0-variants.json`` with their
v0.0.3 shape (``variant_json.is_legacy``). Fetching goes through ``selector_backend.fetch`` (URL policy,
retries, size bounds).
"""

from __future__ import annotations

import html.parser
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any, NamedTuple

from . import fetch, variant_json
from .catalog import Catalog
from .errors import ExternalError, InputError, IntegrityError
from .variant import Variant
from .wheelname import WheelName, parse_wheel_name

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
    return urllib.parse.urljoin(page_url, href)


def parse_project_page(kind: str, body: bytes, page_url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON or PEP 503 HTML project page."""
    files: list[IndexFile] = []
    if kind == "json":
        try:
            data = json.loads(body)
            for item in data["files"]:
                files.append(
                    IndexFile(item["filename"], _join(page_url, item["url"]), item.get("hashes", {}).get("sha256"))
                )
        except (ValueError, KeyError, TypeError) as exc:
            raise ExternalError(f"{page_url}: malformed PEP 691 page ({exc})") from None
        return files
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href in parser.hrefs:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        filename = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        files.append(IndexFile(filename, url, sha))
    return files


def _variants_maps(
    files: list[IndexFile], catalog: Catalog, options: dict[str, Any]
) -> dict[str, tuple[bool, dict[str, Any]]]:
    """version -> (legacy shape?, {label: properties}) from every ``*-variants.json`` listed."""
    out: dict[str, tuple[bool, dict[str, Any]]] = {}
    for item in files:
        match = re.fullmatch(r"(.+?)-([^-]+)-variants\.json", item.filename)
        if not match or normalize_project(match.group(1)) != normalize_project(catalog.name):
            continue
        raw = fetch.get_bytes(item.url, **options)
        if item.sha256 and fetch.hashlib_sha256(raw) != item.sha256:
            raise IntegrityError(f"sha256 mismatch for {item.url}; refusing the variants file")
        try:
            data = json.loads(raw)
            variants = data["variants"]
            if not isinstance(variants, dict):
                raise TypeError("'variants' is not an object")
            legacy = variant_json.is_legacy(data)
        except (ValueError, KeyError, TypeError, InputError) as exc:
            raise ExternalError(f"{item.url}: malformed variants file ({exc})") from None
        if match.group(2) in out and out[match.group(2)][0] is False:
            continue  # both spellings listed: the current one wins
        out[match.group(2)] = (legacy, variants)
    return out


def read_index(location: str, catalog: Catalog, **options: Any) -> Iterator[IndexEntry]:
    """The variant wheels of ``catalog.name`` on the index at ``location``.

    ``options`` are passed to ``fetch.get_bytes`` (offline, timeout, retries).
    """
    url = project_url(location, catalog.name)
    kind, body = _page(url, options)
    files = parse_project_page(kind, body, url)
    maps = _variants_maps(files, catalog, options)
    project = normalize_project(catalog.name)
    parsed: dict[tuple[str, str], Variant] = {}  # (version, label) -> variant: parsed once, shared by its wheels
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
            raise ExternalError(f"{item.url}: the index gives no sha256 for this wheel; refusing it")
        yield IndexEntry(item.filename, item.url, item.sha256.lower(), wheel.label, variant, wheel)


def _variant_of(props: Any, label: str, catalog: Catalog, url: str, legacy: bool) -> Variant:
    """The variant a variants.json entry describes (one label's properties, current or v0.0.3 shape)."""
    try:
        return variant_json.variant_of(label, props, catalog, legacy=legacy)
    except InputError as exc:
        raise ExternalError(f"{url}: {exc}") from None
