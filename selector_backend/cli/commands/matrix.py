"""``matrix``: the CI wheel matrix as a GitHub workflow or JSON jobs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "matrix"
HELP = "expand the catalog's prebuilt matrix into CI jobs (GitHub workflow or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("github", "json"),
        default="json",
        help="github: the .github/workflows/wheels.yml workflow; json: one object per job",
    )
    parser.add_argument("--catalog", type=Path, default=None, help="catalog TOML (default: the project's)")
    parser.add_argument(
        "--entry",
        action="append",
        default=[],
        metavar="NAME",
        help="only this [[prebuilt]] entry (repeatable)",
    )
    parser.add_argument(
        "--plan",
        type=Path,
        default=None,
        metavar="PLAN.json",
        help="only the variants of a `hvd-selector plan` result",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="TAG",
        help="CPython tags to build (repeatable; default cp310..cp313)",
    )
    parser.add_argument("--max-jobs", type=int, default=None, help="job limit (default: GitHub's 256 per matrix)")
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="write here (atomically; a regular file or a new path)"
    )
    parser.add_argument(
        "--check",
        type=Path,
        default=None,
        metavar="FILE",
        help="exit 3 if FILE differs from the generated output (needs a source checkout, or --catalog)",
    )


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog, require_checkout
    from selector_backend.errors import MismatchError
    from selector_backend.files.atomic import write_output
    from selector_backend.files.safeparse import read_text
    from selector_backend.publishing import matrix

    if args.check is not None and args.catalog is None:
        require_checkout("matrix --check", "--catalog variants/catalog.toml of the checkout")
    catalog = load_catalog(args.catalog)
    selection = matrix.select_entries(catalog, args.entry)
    if args.plan is not None:
        from selector_backend.publishing.fleet import load_plan_variants

        selection = matrix.restrict_to(
            selection, load_plan_variants(args.plan, catalog), catalog, source=str(args.plan)
        )
    jobs = matrix.expand(
        catalog,
        selection,
        tuple(args.python) or matrix.DEFAULT_PYTHONS,
        args.max_jobs or matrix.GITHUB_MATRIX_LIMIT,
    )
    text = matrix.render_workflow(jobs, catalog) if args.format == "github" else matrix.jobs_json(jobs)
    if args.check is not None:
        if read_text(args.check, "the file to check") != text:
            raise MismatchError(
                f"{args.check} is stale: regenerate it with `python -m selector_backend matrix "
                f"--format {args.format} -o {args.check}`"
            )
        print(f"{args.check} is current ({len(jobs)} jobs)")
        return 0
    if args.output is not None:
        write_output(args.output, text, "the matrix (-o)")
        print(f"wrote {args.output} ({len(jobs)} jobs)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
