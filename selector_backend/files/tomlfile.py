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


def _parse(path: Path, text: str) -> dict[str, Any]:
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
    return TomlDocument(path, text, _parse(path, text))


def load_toml_remembered(path: Path) -> TomlDocument:
    """``load_toml`` for a file read on every start (the catalog).

    The parsed data is kept as JSON in the user's cache beside the exact text it
    came from; while the file's text is unchanged the JSON is used and the TOML
    parser is never imported (a cold ``resolve`` is mostly imports). The copy is
    trusted only when the user owns it and nobody else can write it.
    """
    text = read_text(path, "the TOML file")
    from selector_backend.files.private_cache import default_cache_dir, read_trusted

    memo = default_cache_dir() / ("toml-" + re.sub(r"[^A-Za-z0-9]+", "_", str(path.resolve()))[-120:] + ".json")
    try:
        raw = read_trusted(memo)
        if raw is not None:
            kept = json.loads(raw.decode("utf-8"))
            if isinstance(kept, dict) and kept.get("text") == text and isinstance(kept.get("data"), dict):
                return TomlDocument(path, text, kept["data"])
    except (OSError, ValueError, RecursionError):
        pass
    data = _parse(path, text)
    try:
        from selector_backend.files.atomic import atomic_write_text

        atomic_write_text(memo, json.dumps({"text": text, "data": data}))
    except (OSError, TypeError, ValueError):  # read-only cache, or data JSON cannot hold (dates): parse each time
        pass
    return TomlDocument(path, text, data)
