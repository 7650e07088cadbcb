"""The error types every command maps to a documented exit code.

Users see ``str(error)`` on one line and no traceback; the exit code tells
scripts what kind of failure it was (docs/reference/exit-codes.md).
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_FITS = 3
EXIT_EXTERNAL = 4


class SelectorError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code = EXIT_INTERNAL


class InputError(SelectorError):
    """Bad input: usage, catalog, host profile, environment value, listing."""

    exit_code = EXIT_BAD_INPUT


class NothingFitsError(SelectorError):
    """No candidate is compatible and the caller required a prebuilt one."""

    exit_code = EXIT_NOTHING_FITS


class MismatchError(SelectorError):
    """A check found a difference: a stale generated file, an installed build that does not fit."""

    exit_code = EXIT_NOTHING_FITS


class ExternalError(SelectorError):
    """Something outside our input failed: network, hash, toolchain, build."""

    exit_code = EXIT_EXTERNAL


class IntegrityError(ExternalError):
    """A file is not what the index promised (hash or variant). Never retried, never a fallback."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix for the closest valid choice, or ''."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


#: A choice list longer than this is not printed whole in an error line (there are ~100 CPU targets).
LISTED_IN_FULL = 12


def unknown_choice(what: str, word: str, choices: Iterable[str], listed_by: str | None = None) -> InputError:
    """The standard 'unknown X' error with a suggestion and the valid set, or, for a long set,
    the closest few and ``listed_by`` (the command that lists every one)."""
    import difflib

    options = sorted(set(choices))
    if len(options) <= LISTED_IN_FULL:
        return InputError(f"unknown {what} {word!r}{did_you_mean(word, options)}; valid: {', '.join(options)}")
    close = difflib.get_close_matches(word, options, n=5, cutoff=0.4)
    nearest = f"; close: {', '.join(close)}" if close else ""
    where = f": {listed_by}" if listed_by else ""
    return InputError(f"unknown {what} {word!r}{did_you_mean(word, options)}{nearest} (all {len(options)}{where})")
