"""``plan``: the fewest variants that give every host of a fleet its best build."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAME = "plan"
HELP = "from a fleet of host profiles, the smallest set of variants giving every host its best build"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "fleet", type=Path, metavar="FLEET.json", help="a JSON list of host profiles (or an object name -> profile)"
    )
    parser.add_argument(
        "--mode",
        choices=("exact", "matrix"),
        default="exact",
        help="exact: each host's exact source-build variant, merged where equal (default); "
        "matrix: the smallest subset of the catalog's prebuilt matrix",
    )
    parser.add_argument("--selector", default=None, help="selector policy for every host (default: auto)")
    parser.add_argument("--catalog", type=Path, default=None, help="catalog TOML (default: the project's)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (input for matrix --plan)")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="write the JSON plan here (atomically; a regular file or a new path)",
    )


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.policy import parse_selector
    from selector_backend.engine.variant import variant_label
    from selector_backend.files.atomic import write_output
    from selector_backend.publishing.fleet import load_fleet, make_plan

    catalog = load_catalog(args.catalog)
    plan = make_plan(load_fleet(args.fleet), catalog, parse_selector(args.selector, catalog), args.mode)
    text = json.dumps(plan.to_json(), indent=2) + "\n"
    if args.output is not None:
        write_output(args.output, text, "the plan (-o)")
    if args.json:
        sys.stdout.write(text)
        return 0
    print(f"{len(plan.variants)} variant(s) serve {len(plan.assignments)} host(s) ({plan.mode} mode):")
    for variant in plan.variants:
        where = f"prebuilt entry {plan.prebuilt_entry[variant]}" if variant in plan.prebuilt_entry else "source only"
        print(f"  {variant_label(variant)}  {' '.join(f'{k}={v}' for k, v in _short(variant))}  [{where}]")
        print(f"            hosts: {', '.join(plan.served[variant])}")
    for a in plan.assignments:
        if a.variant is None:
            print(f"  unserved {a.host}: {a.reasons[0]}")
    return 0


def _short(variant: object) -> list[tuple[str, str]]:
    from selector_backend.engine.variant import Variant

    assert isinstance(variant, Variant)
    return [(k, ",".join(variant.values_of(k))) for k in variant]
