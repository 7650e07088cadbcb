"""``spack``: the Spack spec for a host, spec parsing, build-cache picking, package.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from selector_backend.cli.commands._common import (
    add_resolution_arguments,
    catalog_from_args,
    selection_from_args,
    settings_from_args,
)

NAME = "spack"
HELP = "Spack interop: the spec for this host, parse a spec, pick from a build cache, package.py"


SPEC_DESCRIPTION = """\
Print the Spack spec of the exact source build the engine picks for this host
(or --host-profile): the most specific catalog target the CPU runs, the GPUs'
cuda_arch on the newest CUDA line the driver supports (^cuda@X), and for a GPU
build ^nccl / ^py-torch with the same cuda_arch, so Spack's py-horovod
concretizes too. Multi-valued variants print as name:=value (exactly these)."""

PARSE_DESCRIPTION = """\
Translate a Spack spec into the catalog variant it builds. Every assumption
(a missing variant, a target mapped to a catalog target, an assumed CUDA line)
is a note; an unknown variant or value, +rocm, or a combination the catalog
forbids is an error (exit 2)."""

PICK_DESCRIPTION = """\
Judge every spec of a build-cache listing (a listing page, index.json,
index.manifest.json or a mirror directory) by Spack's rules against this host,
print the best one to `spack install /HASH`, or, when none fits, the spec to
build instead (exit 3 with --require-prebuilt)."""

PACKAGE_DESCRIPTION = """\
Print, write (--write) or check (--check, exit 3 on drift) the Spack recipe
spack/packages/<spack_package>/package.py, generated from the variant catalog
and spack/sdists.toml (the sha256 of each published sdist)."""


def _action(sub: Any, name: str, help_text: str, description: str, example: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="spack_command", metavar="ACTION", required=True)

    spec = _action(
        sub,
        "spec",
        "the Spack spec that fits this host (or --host-profile)",
        SPEC_DESCRIPTION,
        "hvd-selector spack spec --host-profile a100.json --package py-horovod",
    )
    spec.add_argument("--package", help="package name (default: the catalog's spack_package)")
    spec.add_argument("--version", dest="pkg_version", help="version to print after @ ('' for none)")
    spec.add_argument("--json", action="store_true", help="spec, variant and notes as JSON")
    add_resolution_arguments(spec)

    parse = _action(
        sub,
        "parse",
        "parse a Spack spec string into a catalog variant",
        PARSE_DESCRIPTION,
        "hvd-selector spack parse 'py-horovod +cuda cuda_arch=80 tensor_ops=nccl ^cuda@12.4'",
    )
    parse.add_argument("spec", metavar="SPEC", help="e.g. 'py-horovod +cuda cuda_arch=80 tensor_ops=nccl'")
    parse.add_argument("--json", action="store_true", help="variant, carried variants and notes as JSON")
    parse.add_argument("--catalog", type=Path, metavar="FILE", help="variant catalog (default: the project's)")

    pick = _action(
        sub,
        "pick",
        "pick the prebuilt spec of a build-cache listing for this host",
        PICK_DESCRIPTION,
        "hvd-selector spack pick py-horovod-develop.listing --host-profile a100.json",
    )
    pick.add_argument(
        "listing",
        metavar="LISTING",
        type=Path,
        help="cache listing page, index.json, index.manifest.json or a mirror directory",
    )
    pick.add_argument("--any-os", action="store_true", help="accept a spec built on another os")
    pick.add_argument(
        "--package",
        help="package to pick from an index (default: the listing's title, else the catalog's spack_package)",
    )
    pick.add_argument("--json", action="store_true", help="selected, candidates and build_instead as JSON")
    pick.add_argument(
        "--require-prebuilt",
        action="store_true",
        help="exit 3 when no listed spec fits (instead of printing the spec to build)",
    )
    add_resolution_arguments(pick)

    package = _action(
        sub,
        "package",
        "write or check spack/packages/<name>/package.py",
        PACKAGE_DESCRIPTION,
        "hvd-selector spack package --check",
    )
    action = package.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="regenerate the file from the catalog")
    action.add_argument("--check", action="store_true", help="exit 3 if the file drifted from the catalog")
    package.add_argument(
        "--repo",
        type=Path,
        default=None,
        help="Spack repository folder (default: spack/); its sdists.toml, where it has one, "
        "lists the published sdists (else the project's spack/sdists.toml)",
    )
    package.add_argument("--catalog", type=Path, metavar="FILE", help="variant catalog (default: the project's)")


def run(args: argparse.Namespace) -> int:
    handler = {"spec": _spec, "parse": _parse, "pick": _pick, "package": _package}[args.spack_command]
    return handler(args)


def _emit(data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2))


def _spec(args: argparse.Namespace) -> int:
    from selector_backend.interop.spack.mapping import default_version, variant_to_spec

    _, catalog, selection = selection_from_args(args)
    host, selector = selection.host, selection.selector
    variant = selection.require_source_build()
    package = args.package or catalog.spack_package
    version = args.pkg_version if args.pkg_version is not None else default_version(package, catalog)
    spec = variant_to_spec(variant, package, version)
    if args.json:
        _emit(
            {
                "spec": str(spec),
                "package": package,
                "variant": variant.to_json(),
                "selector": str(selector),
                "host": {
                    "os": host.os,
                    "target": host.cpu.microarch if host.cpu else host.machine,
                    "gpus": [g.compute_capability for g in host.nvidia_gpus()],
                    "cuda_driver": host.cuda_driver,
                },
            }
        )
    else:
        print(spec)
    return 0


def _parse(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.variant import format_variant
    from selector_backend.interop.spack.mapping import spec_to_values
    from selector_backend.interop.spack.spec import format_value, parse_spec

    catalog = load_catalog(args.catalog)
    mapped = spec_to_values(parse_spec(args.spec), catalog, strict=True, catalog_target=True)
    variant = catalog.make_variant(mapped.values)
    catalog.check(variant)
    carried = [format_value(v, k) for k, v in mapped.carried]
    if args.json:
        _emit({"variant": variant.to_json(), "carried": carried, "notes": list(mapped.notes)})
    else:
        print(format_variant(variant))
        for item in carried:
            print(f"  carried: {item}")
        for note in mapped.notes:
            print(f"  note: {note}")
    return 0


def _pick(args: argparse.Namespace) -> int:
    from selector_backend.detect import host_profile_for
    from selector_backend.engine.select import select
    from selector_backend.errors import NothingFitsError
    from selector_backend.interop.spack.listing import load_listing
    from selector_backend.interop.spack.pick import pick_of, spack_catalog, spack_sources

    settings = settings_from_args(args)
    catalog = catalog_from_args(args)
    listing = load_listing(args.listing, args.package, catalog.spack_package)
    sources = spack_sources(lambda: host_profile_for(settings), listing, catalog, args.any_os)
    result = pick_of(listing, catalog, select(settings, spack_catalog(catalog), sources))
    if args.json:
        _emit(result.to_json())
    else:
        _print_pick(result)
    if result.selected is None and args.require_prebuilt:
        raise NothingFitsError(f"no spec in {listing.source} fits this host (see --json for every reason)")
    return 0


def _print_pick(result: Any) -> None:
    from collections import Counter

    data = result.to_json()
    sel = data["selected"]
    ok = sum(1 for c in data["candidates"] if c["compatible"])
    total = len(data["candidates"])
    if sel is not None:
        print(f"selected: {sel['install']}")
        print(f"  {sel['spec']}")
        for reason in sel["reasons"]:
            print(f"  + {reason}")
        print(f"{ok} of {total} listed specs fit; this is the best by the engine's ranking")
    elif total == 0:
        print(f"the listing has no {data['listing']['package']} specs (pass --package NAME for another package)")
    else:
        print(f"nothing prebuilt fits: 0 of {total} listed specs run on this host")
        counts = Counter(c["reasons"][0] for c in data["candidates"] if c["reasons"])
        for reason, count in counts.most_common(5):
            print(f"  - {count}x {reason}")
    build = data["build_instead"]
    if build is not None:
        print(f"build instead: spack install {build['spec']}")
    for note in data["notes"]:
        print(f"note: {note}")


#: The axes the generated package.py reads (interop/spack/package_py.py is written for hvd-selector's catalog).
PACKAGE_AXES = ("target", "cuda", "cuda_arch", "tensor_ops", "controllers", "frameworks")


def _package(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog, require_checkout
    from selector_backend.errors import MismatchError
    from selector_backend.files.atomic import write_output
    from selector_backend.files.safeparse import read_text
    from selector_backend.interop.spack.package_py import (
        check_package,
        load_sdists,
        package_path,
        render_package,
        sdists_path,
    )

    catalog = load_catalog(args.catalog)
    missing = [axis for axis in PACKAGE_AXES if axis not in catalog.axes]
    if missing:  # a project of its own: its axes and constraints, its spack/ beside its pyproject.toml
        from selector_backend.engine.project import load_project
        from selector_backend.interop.spack.project_package import render_project_package

        project = load_project()
        repo = args.repo if args.repo is not None else project.root / "spack"
        path = package_path(catalog, repo)
        sdists = load_sdists(repo / "sdists.toml")
        text = render_project_package(catalog, project, sdists)
        if args.check and not args.write:
            if not path.is_file() or read_text(path, "package.py") != text:
                raise MismatchError(
                    f"{path} differs from what the catalog generates; run hvd-selector spack package --write"
                )
            print(f"{path} matches the catalog")
            return 0
    else:
        if (args.check or args.write) and args.repo is None:
            require_checkout(f"spack package {'--check' if args.check else '--write'}", "--repo DIR")
        path = package_path(catalog, args.repo)
        sdists = load_sdists(sdists_path(catalog, args.repo))
        text = render_package(catalog, sdists)
    if args.write:
        write_output(path, text, "package.py (--write)")
        print(f"wrote {path}")
        return 0
    if args.check:
        problems = check_package(path, catalog, sdists)
        if problems:
            raise MismatchError(
                f"{path} drifted from the catalog: {'; '.join(problems)}; run hvd-selector spack package --write"
            )
        print(f"{path} matches the catalog")
        return 0
    print(text, end="")
    return 0
