"""``cache``: where the backend's cache is, what it holds, and emptying it (as ``pip cache``, ``uv cache``)."""

from __future__ import annotations

import argparse
import json
import stat
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from selector_backend.cli.commands._common import add_config_setting_argument

if TYPE_CHECKING:
    from selector_backend.files.private_cache import CacheDir, Tally

NAME = "cache"
HELP = "show the cache directory and what it holds (wheels, plans, index pages, catalog memos, locks), or clean it"

DESCRIPTION = """\
The build backend's cache: verified variant wheels, the plans of recent installs,
parsed index pages, the catalog's parsed TOML and the locks concurrent installs
share. `dir` prints where it is (the cache-dir setting), `info` what each kind
holds, `clean` removes everything or the kinds named. Cleaning never follows a
link out of the cache, leaves a wheel or lock another install is using, and
refuses a cache directory that is not yours."""


def kinds() -> dict[str, tuple[str, str]]:
    """kind -> (its directory in the cache, what it holds); the directories are their owners' names."""
    from selector_backend.files.tomlfile import MEMO_DIRECTORY
    from selector_backend.install import fetch, index_cache, plan_reuse

    return {
        "wheels": (fetch.WHEELS_DIRECTORY, "verified variant wheels, by sha256"),
        "plans": (plan_reuse.DIRECTORY, "decisions shared by one install's hooks (used for 10 minutes)"),
        "index-pages": (index_cache.DIRECTORY, "parsed variant-index pages"),
        "catalog-memos": (MEMO_DIRECTORY, "the parsed catalog of each environment or checkout"),
        "locks": (fetch.LOCKS_DIRECTORY, "one lock per wheel, held while it is fetched"),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    where = sub.add_parser("dir", help="print the cache directory", description="print the cache directory")
    info = sub.add_parser("info", help="what each kind holds (files, size)", description="what each kind holds")
    info.add_argument("--json", action="store_true", help="as JSON")
    clean = sub.add_parser(
        "clean",
        help="remove everything, or the kinds named",
        description="remove everything cached, or only the kinds named",
        epilog="example:\n  hvd-selector cache clean plans index-pages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    clean.add_argument("kinds", nargs="*", metavar="KIND", help=f"any of {', '.join(kinds())} (default: all)")
    for action in (where, info, clean):
        add_config_setting_argument(action)


def run(args: argparse.Namespace) -> int:
    from selector_backend.cli.commands._common import settings_from_args

    settings = settings_from_args(args)
    if args.cache_command == "dir":
        print(settings.cache_dir)
        return 0
    source = settings.origins.get("cache-dir", "default")
    if args.cache_command == "info":
        return _info(settings.cache_dir, source, args.json)
    return _clean(settings.cache_dir, args.kinds)


def _open(cache_dir: Any) -> CacheDir | None:
    """The cache directory, checked as every user of it checks it; an untrusted one is an error (exit 2)."""
    from selector_backend.errors import InputError
    from selector_backend.files.private_cache import CacheDir

    try:
        return CacheDir.open(cache_dir, create=False)
    except OSError as exc:
        raise InputError(f"cache-dir {cache_dir}: cannot open it ({exc.strerror or exc})") from None


def _size(count: int) -> str:
    from selector_backend.files.safeparse import size_text

    return size_text(count)


def _count(root: CacheDir, kind: str) -> Tally:
    """What one kind holds: its directory (and, for catalog memos, those earlier releases kept at the top)."""
    from selector_backend.errors import InputError
    from selector_backend.files.private_cache import Tally
    from selector_backend.files.tomlfile import is_memo

    tally = root.sweep(remove=False, select=is_memo) if kind == "catalog-memos" else Tally()
    try:
        inner = root.child(kinds()[kind][0], create=False)
    except (OSError, InputError) as exc:
        tally.left.append(str(exc))
        return tally
    if inner is not None:
        with inner:
            tally.add(inner.sweep(remove=False))
    return tally


def _info(cache_dir: Any, source: str, as_json: bool) -> int:

    root = _open(cache_dir)
    found: dict[str, Tally] = {}
    other: list[str] = []
    if root is not None:
        with root:
            known = {directory for directory, _ in kinds().values()}
            for kind in kinds():
                found[kind] = _count(root, kind)
            from selector_backend.files.tomlfile import is_memo

            other = [name for name, _ in root.entries() if name not in known and not is_memo(name)]
    if as_json:
        data = {
            "cache_dir": str(cache_dir),
            "source": source,
            "exists": root is not None,
            "kinds": {
                kind: {
                    "directory": directory,
                    "files": found[kind].files if kind in found else 0,
                    "bytes": found[kind].bytes if kind in found else 0,
                    "problems": found[kind].left if kind in found else [],
                }
                for kind, (directory, _) in kinds().items()
            },
            "other": other,
        }
        print(json.dumps(data, indent=2))
        return 0
    print(f"cache-dir: {cache_dir} (from {source})")
    if root is None:
        print("  it does not exist yet: nothing is cached")
        return 0
    print(f"  {'kind':<15}{'files':>7}{'size':>11}  what")
    for kind, (_, what) in kinds().items():
        tally = found[kind]
        print(f"  {kind:<15}{tally.files:>7}{_size(tally.bytes):>11}  {what}")
        for problem in tally.left:
            print(f"    not used: {problem}")
    total_files = sum(t.files for t in found.values())
    print(f"  {'total':<15}{total_files:>7}{_size(sum(t.bytes for t in found.values())):>11}")
    if other:
        print(f"  also there, not the cache's: {', '.join(other)}")
    return 0


def _clean(cache_dir: Any, names: list[str]) -> int:
    from selector_backend.errors import unknown_choice

    for name in names:
        if name not in kinds():
            raise unknown_choice("cache kind", name, kinds())
    root = _open(cache_dir)
    if root is None:
        print(f"cache-dir {cache_dir} does not exist: nothing to clean")
        return 0
    left: list[str] = []
    with root:
        for kind in sorted(names or kinds(), key=list(kinds()).index):
            tally = _clean_kind(root, kind)
            print(f"{kind}: removed {tally.files} file(s), {_size(tally.bytes)}")
            left += tally.left
    for item in left:
        print(f"  left {item}")
    return 0


def _clean_kind(root: CacheDir, kind: str) -> Tally:
    """Empty one kind's directory, then remove it; wheels and locks under their locks."""
    from selector_backend.errors import InputError
    from selector_backend.files.private_cache import Tally
    from selector_backend.files.tomlfile import is_memo
    from selector_backend.install.fetch import LOCKS_DIRECTORY, is_sha256

    directory = kinds()[kind][0]
    tally = Tally()
    if kind == "catalog-memos":
        tally.add(root.sweep(remove=True, select=is_memo))
    try:
        inner = root.child(directory, create=False)
    except (OSError, InputError):  # a link or someone else's: remove the entry itself, never what is behind it
        tally.add(root.sweep(remove=True, select=lambda name: name == directory))
        return tally
    if inner is None:
        return tally
    locks = None
    if kind in ("wheels", "locks"):
        try:
            locks = inner if kind == "locks" else root.child(LOCKS_DIRECTORY, create=False, private=True)
        except (OSError, InputError):
            locks = None
    with inner, locks if locks is not None and locks is not inner else nullcontext():

        def hold(name: str) -> AbstractContextManager[bool]:
            if locks is None:
                return nullcontext(True)
            if kind == "wheels":
                return locks.try_lock(f"{name}.lock") if is_sha256(name) else nullcontext(True)
            info = inner.lstat(name)
            regular = info is not None and stat.S_ISREG(info.st_mode)
            return locks.try_lock(name) if name.endswith(".lock") and regular else nullcontext(True)

        tally.add(inner.sweep(remove=True, hold=hold))
    root.remove(directory)  # only when empty
    return tally
