"""Build-cache listings: what prebuilt specs of a package a Spack mirror holds.

Three sources, one result (``Listing``):

- a cache listing page (cache.spack.io): front matter whose ``spec_details:``
  line is a JSON array of {hash, os, platform, target, compiler, variants,
  versions, stacks};
- a v2 build cache's ``build_cache/index.json``: Spack's database JSON,
  ``{"database": {"version": ..., "installs": {HASH: {"spec": NODE}}}}``;
- a v3 build cache's ``v3/manifests/index/index.manifest.json``: a manifest
  whose ``data`` names the index blob (``blobs/sha256/XX/CHECKSUM``) by
  media type ``application/vnd.spack.db.vN+json``; the blob is the database
  JSON above, checked against its sha256.

A path may be any of those files or a mirror directory holding one. Every
problem is an InputError naming the file and the entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector_backend.errors import InputError
from selector_backend.files import safeparse
from selector_backend.interop.spack.spec import SpackSpec, SpackValue, parse_variant_string

#: Compiler-flag parameters of a database node: not variants.
_FLAG_PARAMETERS = ("cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs")
_DETAIL_FIELDS = ("hash", "os", "platform", "target", "variants", "versions")
V3_INDEX = Path("v3", "manifests", "index", "index.manifest.json")
V2_INDEX = Path("build_cache", "index.json")
#: The most a listing (or its index blob, inflated) is read into memory. Parsed, a database takes about
#: 7 times its size (a 40 MB index peaked at 289 MB; a 300 MB one at 1.86 GB, and 1 GiB could end in a
#: MemoryError), so the limit is what a parse can hold in about 1 GB: a larger index is refused in one line.
MAX_LISTING_BYTES = 128 << 20
TRUNCATED = "; is the file truncated?"


@dataclass(frozen=True)
class ListingEntry:
    """One prebuilt spec: its DAG hash (``spack install /HASH``) and what it is."""

    hash: str
    spec: SpackSpec
    stacks: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Listing:
    source: str
    format: str
    package: str | None
    entries: tuple[ListingEntry, ...]


def load_listing(path: Path, package: str | None = None, default_package: str | None = None) -> Listing:
    """Read any supported listing; ``package`` filters index files by name.

    Without ``package``: a listing page's title, else ``default_package``.
    """
    path = Path(path)
    if path.is_dir():
        for rel in (V3_INDEX, V2_INDEX):
            if (path / rel).is_file():
                return load_listing(path / rel, package, default_package)
        raise InputError(
            f"{path}: no build-cache index in this directory (looked for {V3_INDEX} and "
            f"{V2_INDEX}); pass a listing page or an index file"
        )
    raw = safeparse.read_bytes(path, "listing", MAX_LISTING_BYTES)
    text = _decode(raw, str(path))
    if text.lstrip().startswith("---") or "\nspec_details:" in text:
        return parse_listing_page(text, str(path), package, default_package)
    data = _json(text, str(path))
    if isinstance(data, dict) and "database" in data:
        return parse_database(data, str(path), "index.json", package or default_package)
    if isinstance(data, dict) and "data" in data and "version" in data:
        return _read_manifest(data, path, package or default_package)
    raise InputError(
        f"{path}: not a Spack build-cache listing (expected a cache listing page with "
        "spec_details, a database index.json, or an index.manifest.json)"
    )


def _gunzip(raw: bytes, source: str) -> bytes:
    """gzip data inflated to at most ``MAX_LISTING_BYTES`` (a small file may inflate to gigabytes)."""
    import zlib

    inflate = zlib.decompressobj(wbits=31)
    try:
        out = inflate.decompress(raw, MAX_LISTING_BYTES)
    except zlib.error as exc:
        raise InputError(f"{source}: truncated or corrupt gzip data ({exc})") from None
    if inflate.unconsumed_tail:
        raise InputError(f"{source}: inflates to more than {safeparse.size_text(MAX_LISTING_BYTES)}; refusing it")
    if not inflate.eof:
        raise InputError(f"{source}: truncated or corrupt gzip data (it ends early)")
    return out


def _decode(raw: bytes, source: str) -> str:
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, source)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _json(text: str, source: str) -> Any:
    try:
        return safeparse.loads(text, source, hint=TRUNCATED)
    except MemoryError:
        raise InputError(
            f"{source}: parsing it needs more memory than this machine gives; pass a smaller listing "
            "(one view of the mirror, or --package's own listing page)"
        ) from None


# ------------------------------------------------------------------ listing page
def parse_listing_page(
    text: str, source: str, package: str | None = None, default_package: str | None = None
) -> Listing:
    """A cache listing page: ``title:`` names the package, ``spec_details:`` the specs."""
    title = None
    details_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("title:"):
            title = line.partition(":")[2].strip().strip("\"'") or None
        elif line.startswith("spec_details:"):
            details_line = (number, line.partition(":")[2].strip())
    if details_line is None:
        raise InputError(f"{source}: no spec_details: line; is this a Spack cache listing page?")
    number, payload = details_line
    details = safeparse.loads(payload, f"{source}:{number}: spec_details", hint=TRUNCATED)
    if not isinstance(details, list):
        raise InputError(f"{source}:{number}: spec_details must be a JSON array of spec objects")
    name = package or title or default_package
    if name is None:
        raise InputError(f"{source}: the listing has no title: naming its package; pass --package NAME")
    entries = tuple(_detail_entry(item, index, name, f"{source}:{number}") for index, item in enumerate(details))
    return Listing(source, "cache listing page", name, entries)


def _detail_entry(item: Any, index: int, package: str, source: str) -> ListingEntry:
    where = f"{source}: spec_details[{index}]"
    if not isinstance(item, dict):
        raise InputError(f"{where} is not a JSON object")
    if isinstance(item.get("hash"), str):
        where += f" (hash {item['hash']})"
    missing = [key for key in _DETAIL_FIELDS if key not in item]
    if missing:
        raise InputError(f"{where}: missing field {', '.join(missing)}")
    for key in ("hash", "os", "platform", "target"):
        if not isinstance(item[key], str) or not item[key]:
            raise InputError(f"{where}: {key} must be a non-empty string")
    if not isinstance(item["variants"], list):
        raise InputError(f"{where}: variants must be a list of strings like +cuda or tensor_ops=nccl")
    versions = item["versions"]
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) for v in versions):
        raise InputError(f"{where}: versions must be a non-empty list of strings")
    compiler = item.get("compiler")
    if compiler is not None and not isinstance(compiler, str):
        raise InputError(f"{where}: compiler must be a string like gcc@=13.2.0")
    stacks = item.get("stacks", [])
    if not isinstance(stacks, list) or not all(isinstance(s, str) for s in stacks):
        raise InputError(f"{where}: stacks must be a list of strings")
    variants: dict[str, SpackValue] = {}
    for text in item["variants"]:
        name, value = parse_variant_string(text, where)
        if name in variants:
            raise InputError(f"{where}: variant {name} given twice")
        variants[name] = value
    spec = SpackSpec(
        name=package,
        version=versions[0],
        variants=tuple(variants.items()),
        platform=item["platform"],
        os=item["os"],
        target=item["target"],
        compiler=compiler,
        hash=item["hash"],
    )
    return ListingEntry(item["hash"], spec, tuple(stacks), where)


# ------------------------------------------------------------------ database index (v2 index.json, v3 blob)
def parse_database(data: Any, source: str, kind: str, package: str | None) -> Listing:
    """Spack's database JSON; dependency versions (cuda) come from their own records."""
    db = data.get("database") if isinstance(data, dict) else None
    if not isinstance(db, dict) or not isinstance(db.get("installs"), dict):
        raise InputError(f"{source}: database.installs must be an object of HASH: record")
    version = db.get("version")
    installs: dict[str, Any] = db["installs"]
    nodes: dict[str, dict[str, Any]] = {}
    for hash_, record in installs.items():
        where = f"{source}: installs[{hash_}]"
        if not isinstance(record, dict) or not isinstance(record.get("spec"), dict):
            raise InputError(f"{where}: record needs a spec object")
        nodes[hash_] = record["spec"]
    if package is None:
        raise InputError(f"{source}: an index lists every package in the cache; pass --package NAME")
    entries = []
    for hash_, node in nodes.items():
        if node.get("name") != package:
            continue
        if installs[hash_].get("in_buildcache") is False:
            continue
        entries.append(_node_entry(node, hash_, nodes, f"{source}: installs[{hash_}]"))
    entries.sort(key=lambda e: e.hash)
    return Listing(source, f"{kind} (database v{version})", package, tuple(entries))


def _node_entry(node: dict[str, Any], hash_: str, nodes: dict[str, dict[str, Any]], where: str) -> ListingEntry:
    for key in ("name", "version", "arch"):
        if key not in node:
            raise InputError(f"{where}: spec is missing {key}")
    arch = node["arch"]
    if not isinstance(arch, dict):
        raise InputError(f"{where}: arch must be an object with platform, platform_os, target")
    target = arch.get("target")
    if isinstance(target, dict):
        target = target.get("name")
    platform, os_ = arch.get("platform"), arch.get("platform_os")
    for key, value in (("arch.platform", platform), ("arch.platform_os", os_), ("arch.target", target)):
        if not isinstance(value, str) or not value:
            raise InputError(f"{where}: {key} must be a non-empty string")
    params = node.get("parameters", {})
    if not isinstance(params, dict):
        raise InputError(f"{where}: parameters must be an object")
    variants: list[tuple[str, SpackValue]] = []
    for name, value in sorted(params.items()):
        if name in _FLAG_PARAMETERS:
            continue
        if isinstance(value, bool):
            variants.append((name, value))
        elif isinstance(value, str) and value:
            variants.append((name, (value,)))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value) and value:
            variants.append((name, tuple(value)))
        else:
            raise InputError(
                f"{where}: parameters.{name} is {value!r}; expected a boolean, a string or a list of strings"
            )
    deps = []
    for dep in node.get("dependencies", []):
        if not isinstance(dep, dict) or "hash" not in dep or "name" not in dep:
            raise InputError(f"{where}: dependencies entries need name and hash")
        dep_node = nodes.get(dep["hash"])
        if dep_node is None:
            continue  # not every dependency is in the cache's index
        deps.append(SpackSpec(name=str(dep["name"]), version=str(dep_node.get("version") or "") or None))
    compiler = _compiler(node, nodes)
    spec = SpackSpec(
        name=str(node["name"]),
        version=str(node["version"]),
        variants=tuple(variants),
        platform=platform,
        os=os_,
        target=target,
        compiler=compiler,
        hash=hash_,
        dependencies=tuple(d for d in deps if d.name == "cuda"),
    )
    return ListingEntry(hash_, spec, (), where)


def _compiler(node: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> str | None:
    """Spec format v4 has a compiler object; v5 records compilers as c/cxx dependencies."""
    comp = node.get("compiler")
    if isinstance(comp, dict) and comp.get("name"):
        return f"{comp['name']}@={comp.get('version', '')}".rstrip("@=")
    for dep in node.get("dependencies", []):
        virtuals = (dep.get("parameters") or {}).get("virtuals", []) if isinstance(dep, dict) else []
        if "cxx" in virtuals or "c" in virtuals:
            dep_node = nodes.get(dep.get("hash", ""), {})
            return f"{dep['name']}@={dep_node.get('version', '')}".rstrip("@=")
    return None


def _read_manifest(data: dict[str, Any], path: Path, package: str | None) -> Listing:
    """A v3 index manifest: find the database blob beside it and check its sha256."""
    source = str(path)
    records = data.get("data")
    if not isinstance(records, list):
        raise InputError(f"{source}: data must be a list of blob records")
    db_records = []
    for index, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise InputError(f"{source}: data[{index}] is not an object")
        for key in ("mediaType", "checksum", "checksumAlgorithm", "compression", "contentLength"):
            if key not in rec:
                raise InputError(f"{source}: data[{index}] is missing {key}")
        if str(rec["mediaType"]).startswith("application/vnd.spack.db."):
            db_records.append(rec)
    if not db_records:
        raise InputError(f"{source}: no application/vnd.spack.db.* blob in this manifest")
    rec = db_records[0]
    if rec["checksumAlgorithm"] != "sha256":
        raise InputError(f"{source}: checksumAlgorithm {rec['checksumAlgorithm']!r} is not supported (sha256)")
    checksum = str(rec["checksum"])
    root = _mirror_root(path)
    blob = root / "blobs" / "sha256" / checksum[:2] / checksum
    raw = safeparse.read_bytes(blob, f"index blob of {source}", MAX_LISTING_BYTES)
    actual = hashlib.sha256(raw).hexdigest()
    if actual != checksum:
        raise InputError(f"{blob}: sha256 {actual} does not match the manifest's {checksum}")
    if rec["compression"] not in ("none", "gzip"):
        raise InputError(f"{source}: compression {rec['compression']!r} is not supported (none, gzip)")
    text = _decode(raw, str(blob))
    return parse_database(_json(text, str(blob)), str(blob), f"index.manifest.json v{data['version']}", package)


def _mirror_root(manifest: Path) -> Path:
    """``ROOT/v3/manifests/index[/VIEW]/index.manifest.json`` -> ROOT (else the manifest's folder)."""
    here = manifest.resolve()
    for parent in here.parents:
        if parent.name == "manifests" and parent.parent.name == "v3":
            return parent.parent.parent
    return here.parent
