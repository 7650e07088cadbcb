"""``build-variants``: build the variants this machine can build and publish a variant index."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selector_backend.engine.catalog import Catalog
    from selector_backend.publishing.publish import Published

NAME = "build-variants"
HELP = "build this machine's buildable prebuilt variants (auditwheel-repaired) and publish a variant index"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--index",
        type=Path,
        required=True,
        metavar="DIR",
        help="variant index root to publish into (readers use DIR/simple)",
    )
    parser.add_argument("--catalog", type=Path, default=None, help="catalog TOML (default: the project's)")
    parser.add_argument(
        "--entry", action="append", default=[], metavar="NAME", help="only this [[prebuilt]] entry (repeatable)"
    )
    parser.add_argument(
        "--plan", type=Path, default=None, metavar="PLAN.json", help="only the variants of a `hvd-selector plan` result"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="'AXIS=VALUE ...'",
        help="build exactly this variant (repeatable; missing axes take defaults)",
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        default=Path("wheelhouse"),
        help="where built and repaired wheels are kept (default: ./wheelhouse)",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="project source tree to build (default: the one this command runs from)",
    )
    parser.add_argument("--no-repair", action="store_true", help="skip auditwheel repair (linux_* tags)")
    parser.add_argument(
        "--isolated", action="store_true", help="build in an isolated environment (downloads build requirements)"
    )
    parser.add_argument("--sdist", type=Path, action="append", default=[], help="also publish this sdist")
    parser.add_argument(
        "--index-url",
        default=None,
        metavar="URL",
        help="where the index will be served (.../simple): build the sdist with URL embedded and publish it, "
        "so stock pip installs from the index",
    )
    parser.add_argument(
        "--publish-only",
        type=Path,
        default=None,
        metavar="DIR",
        help="build nothing: publish the wheels (and sdists) already in DIR",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be built or skipped, and why")


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.project import load_project
    from selector_backend.errors import InputError
    from selector_backend.publishing import matrix, publish

    project = load_project(args.source)  # the project in --source, else the one in the current directory
    catalog = load_catalog(args.catalog or (project.catalog_path if project.declared else None))
    if args.publish_only is not None:
        if not args.publish_only.is_dir():
            raise InputError(f"--publish-only {args.publish_only}: not a directory")
        # Recursive: CI downloads each job's artifact into its own folder, because
        # every variant's wheel has the same standard file name.
        wheels = _files(args.publish_only, "*.whl")
        sdists = _files(args.publish_only, "*.tar.gz") + list(args.sdist)
        if not wheels:
            raise InputError(f"--publish-only {args.publish_only}: no wheels there")
        _check_environment(args, wheels=False)
        _publish_release(args, catalog, wheels, sdists)
        return 0

    if args.variant:
        selection = [("--variant", catalog.parse_variant(text, fill_defaults=True)) for text in args.variant]
    else:
        selection = matrix.select_entries(catalog, args.entry)
        if args.plan is not None:
            from selector_backend.publishing.fleet import load_plan_variants

            selection = matrix.restrict_to(
                selection, load_plan_variants(args.plan, catalog), catalog, source=str(args.plan)
            )
    jobs = matrix.expand(catalog, selection, limit=10**6)
    todo: list[tuple[matrix.Job, str | None]] = []
    skipped: list[tuple[matrix.Job, str | None]] = []
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    have = {(label, name.split("-")[2]) for name, label in publish.published_wheels(args.index, catalog).items()}
    for job in jobs:
        if (job.label, py) in have:
            skipped.append((job, f"already published for {py} (published files are immutable)"))
            continue
        why = publish.why_not_buildable(job.variant, catalog)
        (skipped if why else todo).append((job, why))
    for job, why in skipped:
        print(f"skip {job.name}: {why}", file=sys.stderr)
    if not todo and any(why and why.startswith("already published") for _, why in skipped):
        _check_environment(args, wheels=False)
        _publish_release(args, catalog, [], list(args.sdist))
        return 0
    if not todo:
        raise InputError(
            f"none of the {len(jobs)} selected variants can be built on this machine "
            "(see the skip lines); choose others with --entry/--variant"
        )
    _check_environment(args, wheels=True)  # before a dry run too: it says what the real run would do
    source = _source(args)
    if args.dry_run:
        for job, _ in todo:
            print(f"would build {job.name}: {job.variant_string}")
        return 0

    source = _source(args)
    bar = publish.Progress(len(todo), "building")
    built = []
    with tempfile.TemporaryDirectory(prefix="hvd-raw-") as raw_root:
        for job, _ in todo:
            # One folder per variant: every variant's wheel has the same standard name.
            final = args.wheelhouse / job.label
            if args.no_repair:
                wheel = publish.build_one(
                    job.variant, final, source_dir=source, catalog=catalog, isolated=args.isolated
                )
            else:
                raw = publish.build_one(
                    job.variant, Path(raw_root) / job.label, source_dir=source, catalog=catalog, isolated=args.isolated
                )
                wheel = publish.repair(raw, final, job.auditwheel_excludes, job.isa_check)
            publish.check_built(wheel, job.variant, catalog)
            built.append(wheel)
            bar.step(job.name)
    _publish_release(args, catalog, built, list(args.sdist))
    return 0


def _publish_release(args: argparse.Namespace, catalog: Catalog, wheels: list[Path], sdists: list[Path]) -> None:
    """Everything the release carries: the companions (built first: a failing build writes nothing),
    then the variant wheels and sdists on the project's page, then each companion on its own page."""
    from selector_backend.publishing import publish

    sdists = sdists + _index_sdist(args)
    with tempfile.TemporaryDirectory(prefix="hvd-companions-") as work:  # the index keeps its own copies
        companions = publish.build_companions(_source(args), Path(work), catalog, sdists=sdists)
        done = publish.publish(wheels, args.index, catalog, sdists=sdists)
        others = publish.publish_companions(companions, args.index, catalog)
    _report(done, args.index, publish.normalize(catalog.name))
    for page in others:
        print(f"  and {page.project_dir.parent.name}/: {', '.join(page.files)}")


def _index_sdist(args: argparse.Namespace) -> list[Path]:
    """The sdist that knows this index (``--index-url``), built from the source tree into the wheelhouse."""
    if args.index_url is None:
        return []
    from selector_backend.publishing import publish

    return [publish.build_sdist(_source(args), args.wheelhouse / "sdist", args.index_url)]


def _check_environment(args: argparse.Namespace, *, wheels: bool) -> None:
    """The source tree and every tool the run needs, checked before anything runs (a dry run too)."""
    from selector_backend.errors import InputError
    from selector_backend.publishing import publish

    sdist = args.index_url is not None
    if args.index_url is not None and not args.index_url.strip():
        raise InputError(
            "--index-url is empty: pass the URL the index will be served at (.../simple); "
            "in CI, set the repository variable VARIANT_INDEX_URL"
        )
    source = _source(args)  # the companions are built from it on every run
    needs = publish.publishing_requirements(
        wheels=wheels, isolated=args.isolated, repair=not args.no_repair, sdist=sdist
    )
    publish.check_requirements([*needs, *publish.companion_requirements(source)], "build-variants")


def _source(args: argparse.Namespace) -> Path:
    """The project tree to build: ``--source``, else the project of the current directory (a project of its
    own: its root; else the checkout this command runs from). An installed copy (site-packages) is no project
    tree: say so before anything runs, dry run included."""
    from selector_backend import PACKAGE_DIR
    from selector_backend.engine.project import load_project
    from selector_backend.errors import InputError

    if args.source is not None:
        source = Path(args.source)
        if not (source / "pyproject.toml").is_file():
            raise InputError(f"--source {source}: no pyproject.toml there; pass a checkout or an unpacked sdist")
        return source
    project = load_project()
    source = project.root if project.declared else PACKAGE_DIR.parent
    if not (source / "pyproject.toml").is_file():
        raise InputError(
            f"build-variants builds from the project's source, and {source} is an installed copy: "
            "pass --source DIR, a checkout or an unpacked sdist of hvd-selector"
        )
    return source


def _files(folder: Path, pattern: str) -> list[Path]:
    """Files below ``folder`` (recursive), skipping hidden folders such as work dirs."""
    return sorted(
        p for p in folder.rglob(pattern) if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def _report(done: Published, index: Path, project: str) -> None:
    state = "updated" if done.changed else "unchanged"
    print(f"variant index {state}: {index / 'simple' / project}/ lists {len(done.files)} files ({len(done.added)} new)")
    if not any(name.endswith(".tar.gz") for name in done.files):
        print(
            "note: no sdist is published, so stock pip finds nothing to install here (uv with wheel variants does); "
            "publish one with --index-url URL (where this index will be served)",
            file=sys.stderr,
        )
