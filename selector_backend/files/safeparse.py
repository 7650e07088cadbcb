"""Untrusted text (JSON from the network, files from the user) with every failure as one line.

``json.loads`` raises ValueError for bad syntax, RecursionError for a
document nested thousands deep and UnicodeDecodeError for bytes that are not
UTF-8; an index page or a host-profile file can contain any of them.
"""

from __future__ import annotations

import json
from typing import Any

from selector_backend.errors import InputError, SelectorError


def loads(data: str | bytes, source: str, error: type[SelectorError] = InputError) -> Any:
    """Parsed JSON, or ``error`` naming ``source`` and what is wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{source} is JSON nested too deep to read; refusing it") from None
    except ValueError as exc:
        raise error(f"{source} is not valid JSON ({str(exc)[:200]})") from None


def read_text(path: Any, what: str) -> str:
    """A UTF-8 file's text; unreadable or not UTF-8 is an InputError naming ``what``."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def only_chars(text: str, chars: bytes) -> bool:
    """Every character of ``text`` is one of the ASCII ``chars``. A whole column of strings joined is
    checked in one C loop (``bytes.translate`` deleting them leaves nothing), several times faster
    than a regex or a per-character walk."""
    return text.isascii() and not text.encode("ascii").translate(None, chars)
