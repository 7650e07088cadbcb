"""``resolve``: rank every candidate for this host and say which one fits best."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from selector_backend.cli.arguments import Argument, add_all
from selector_backend.cli.commands._common import RESOLUTION_ARGUMENTS, catalog_from_args, settings_from_args

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Sequence

    from selector_backend.engine.host import HostProfile
    from selector_backend.engine.resolve import Candidate, CandidateFile, RankedCandidate, Resolution

NAME = "resolve"
EXPLAIN_TOP = 10
EXPLAIN_WHEELS = 3  # wheels shown under each candidate without --all
HELP = "rank the prebuilt variants for this machine (or --host-profile) and select the best"


ARGUMENTS = (
    Argument("--json", group="output", action="store_true", help="machine-readable resolution"),
    Argument(
        "--explain",
        group="output",
        action="store_true",
        help=f"the top {EXPLAIN_TOP} candidates with their reasons (--all: every one)",
    ),
    Argument("--all", action="store_true", help="with --explain: every candidate, however many"),
    Argument(
        "--require-prebuilt",
        action="store_true",
        help="exit 3 when no prebuilt candidate fits (instead of naming a source build)",
    ),
    Argument(
        "--index-url",
        metavar="URL",
        help="rank the wheels of this variant index instead of the catalog's prebuilt matrix",
    ),
    *RESOLUTION_ARGUMENTS,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_all(parser, ARGUMENTS)


def run(args: argparse.Namespace) -> int:
    from selector_backend.detect import host_profile_for
    from selector_backend.engine.select import Sources, select
    from selector_backend.engine.sources import catalog_matrix
    from selector_backend.errors import NothingFitsError

    settings = settings_from_args(args)
    catalog = catalog_from_args(args)
    urls = [args.index_url] if args.index_url else list(settings.index_url)
    candidates: Callable[[HostProfile], Iterable[Candidate]] = lambda _: catalog_matrix(catalog)  # noqa: E731
    if urls:  # the index reader (and its HTTP client) only when an index is read
        from selector_backend.install.variant_index import index_candidates

        candidates = lambda host: index_candidates(urls, catalog, host, settings)  # noqa: E731
    sources = Sources(lambda: host_profile_for(settings), candidates)
    resolution = select(settings, catalog, sources).resolution
    if not urls and not args.json:
        print(
            "note: no variant index is configured, so this ranks the catalog's prebuilt matrix, which is not "
            "what pip will install; pass --index-url URL (the index pip uses) to check that"
        )
    if args.json:
        # indented for a person at a terminal; compact, from shared parts (several times faster), for a program
        if sys.stdout.isatty():
            print(json.dumps(resolution.to_json(), indent=2))
        else:
            sys.stdout.write(resolution.to_json_text() + "\n")
    elif args.explain:
        print_explain(resolution, None if args.all else EXPLAIN_TOP)
    else:
        print_summary(resolution)
    if resolution.selected is None and resolution.source_build is None:
        raise NothingFitsError(
            f"nothing fits this host with selector {resolution.selector}: no prebuilt variant and no source build "
            "(see the notes above)"
        )
    if resolution.selected is None and args.require_prebuilt:
        raise NothingFitsError(
            "no prebuilt variant fits this host (see --explain); without "
            "--require-prebuilt the source build above would be used"
        )
    return 0


def print_summary(resolution: Resolution) -> None:
    from selector_backend.engine.variant import format_variant

    if resolution.selected is not None:
        sel = resolution.selected
        print(f"selected: {format_variant(sel.variant)}  [{sel.candidate.source}]")
        for reason in sel.reasons:
            print(f"  + {reason}")
    else:
        print("selected: nothing prebuilt fits this host")
        for cand in resolution.ranked[:3]:
            print(f"  - {format_variant(cand.variant)}: {cand.first_failure() or ''}")
    if resolution.selected is None and resolution.source_build is not None:
        print(f"source build would target: {format_variant(resolution.source_build)}")
    for note in resolution.notes:
        print(f"note: {note}")
    fit = _fit_count(resolution.ranked)
    print(f"{fit} (selector: {resolution.selector}); --explain shows the best, --explain --all every one")


def _fit_count(ranked: Sequence[RankedCandidate]) -> str:
    """``3 of 2500 candidates fit`` (and of their wheels, where they come as wheels)."""
    text = f"{sum(1 for c in ranked if c.compatible)} of {len(ranked)} candidates fit"
    wheels = sum(len(c.files) for c in ranked)
    if wheels:
        text += f" ({sum(c.fitting for c in ranked if c.compatible)} of {wheels} wheels)"
    return text


def print_explain(resolution: Resolution, top: int | None = None) -> None:
    """The first ``top`` candidates (every one when None) with their reasons and wheels, and a count of the rest."""
    from selector_backend.engine.variant import format_variant

    shown = resolution.ranked if top is None else resolution.ranked[:top]
    for rank, cand in enumerate(shown, 1):
        mark = "ok " if cand.compatible else "no "
        chosen = " <= selected" if rank == 1 and resolution.selected is not None else ""
        print(f"{rank:>3}. {mark} {format_variant(cand.variant)}  [{cand.candidate.source}]{chosen}")
        for reason in cand.reasons:
            print(f"          {reason}")
        files = cand.files if top is None else cand.files[:EXPLAIN_WHEELS]
        for number, file in enumerate(files):
            print(f"          wheel {file.filename}: {_wheel_verdict(cand.compatible and number < cand.fitting, file)}")
        if len(files) < len(cand.files):
            more = len(cand.files) - len(files)
            fit = max(0, cand.fitting - len(files)) if cand.compatible else 0
            print(f"          ... {more} more wheel(s), {fit} of them fit; --explain --all lists every one")
    hidden = len(resolution.ranked) - len(shown)
    if hidden:
        fit = sum(1 for c in resolution.ranked[len(shown) :] if c.compatible)
        print(f"  ... {hidden} more candidates ({fit} of them fit); --explain --all shows every one")
    if resolution.source_build is not None:
        print(f"source build would target: {format_variant(resolution.source_build)}")
    for note in resolution.notes:
        print(f"note: {note}")


def _wheel_verdict(fits: bool, file: CandidateFile) -> str:
    """``ok, <reasons>``; ``no, <what the wheel fails>``; or, for a wheel that would fit a host the
    variant fits, ``no (the variant does not fit), <reasons>``: never "no" beside only passing reasons."""
    reasons = "; ".join(f.reason for f in file.findings)
    failed = "; ".join(f.reason for f in file.findings if not f.ok)
    if fits:
        return f"ok, {reasons}"
    return f"no, {failed}" if failed else f"no (the variant does not fit), {reasons}"
