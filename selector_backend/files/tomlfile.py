"""Reading TOML files with errors that name the file and line.

tomllib reports syntax errors with a line, but not semantic ones (an unknown
key, a bad value); ``locate`` finds the line a key or value was written on so
catalog and config errors can point at it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from selector_backend.errors import InputError
from selector_backend.files.safeparse import read_text


class TomlDocument:
    """A parsed TOML file that remembers its text for line lookups."""

    def __init__(self, path: Path, text: str, data: dict[str, Any]) -> None:
        self.path = path
        self.text = text
        self.data = data

    def locate(self, *needles: str) -> str:
        """'file:line' of the needles found one after another (best effort).

        ``locate("[[prebuilt]]", "target")`` finds the first ``target`` after
        the first ``[[prebuilt]]``; a needle not found keeps the last hit.
        """
        lines = [line.split("#", 1)[0] for line in self.text.splitlines()]
        found: int | None = None
        start = 0
        for needle in needles:
            pattern = re.compile(r"(^|[\s\[\"'.{,])" + re.escape(needle) + r"($|[\s\]\"'.=,}])")
            hit = next((i for i in range(start, len(lines)) if pattern.search(lines[i])), None)
            if hit is None:
                break
            found, start = hit, hit + 1
        return f"{self.path}:{found + 1}" if found is not None else str(self.path)

    def error(self, message: str, *needles: str) -> InputError:
        return InputError(f"{self.locate(*needles)}: {message}")


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """TOML text already read (a file, or a member of an archive named by ``path``); bad TOML is one InputError."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        from selector_backend.vendored import import_module

        tomllib = import_module("tomli")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid TOML: nested too deep to read") from None


def load_toml(path: Path) -> TomlDocument:
    """Parse ``path``; a missing file or a syntax error is an InputError."""
    text = read_text(path, "the TOML file")
    return TomlDocument(path, text, parse_toml(path, text))


MEMO_DIRECTORY = "catalog-memos"
#: Memos kept (one per catalog file: each virtual environment or checkout has its own); the oldest go first.
MEMO_KEEP = 16
_MEMO_NAME = re.compile(r"toml-[A-Za-z0-9_]+\.json")


def is_memo(name: str) -> bool:
    """A memo's file name (in ``MEMO_DIRECTORY``; earlier releases kept them at the top of the cache)."""
    return _MEMO_NAME.fullmatch(name) is not None


def load_toml_remembered(path: Path) -> TomlDocument:
    """``load_toml`` for a file read on every start (the catalog).

    The parsed data is kept as JSON in the cache directory of this process's
    settings (``catalog-memos/``; a process that loaded none keeps nothing)
    beside the exact text it came from; while the file's text is unchanged the
    JSON is used and the TOML parser is never imported (a cold ``resolve`` is
    mostly imports). The copy is read only through ``private_cache`` (this
    user's own, nobody else can write it); the newest ``MEMO_KEEP`` are kept.
    """
    from selector_backend.files.private_cache import active_cache_dir, open_optional

    text = read_text(path, "the TOML file")
    name = "toml-" + re.sub(r"[^A-Za-z0-9]+", "_", str(path.resolve()))[-120:] + ".json"
    memos = open_optional(active_cache_dir(), MEMO_DIRECTORY, create=False)
    if memos is not None:
        with memos:
            raw = memos.read(name)
        try:
            kept = json.loads(raw.decode("utf-8")) if raw is not None else None
            if isinstance(kept, dict) and kept.get("text") == text and isinstance(kept.get("data"), dict):
                return TomlDocument(path, text, kept["data"])
        except (ValueError, RecursionError):
            pass
    data = parse_toml(path, text)
    try:
        memo = json.dumps({"text": text, "data": data}).encode()
    except (TypeError, ValueError):  # data JSON cannot hold (dates): parse each time
        return TomlDocument(path, text, data)
    _remember(name, memo)
    return TomlDocument(path, text, data)


def _remember(name: str, memo: bytes) -> None:
    """Store a memo and prune the old ones (and those earlier releases left at the top of the cache)."""
    from selector_backend.files.private_cache import active_cache_dir, open_optional

    root = open_optional(active_cache_dir(), create=True)
    if root is None:
        return
    with root:
        try:
            memos = root.child(MEMO_DIRECTORY, create=True)
        except (OSError, InputError):
            return
        assert memos is not None
        with memos:
            try:
                memos.write(name, memo)
                memos.prune(is_memo, keep=MEMO_KEEP)
            except OSError:
                return
        root.prune(is_memo, keep=0)
