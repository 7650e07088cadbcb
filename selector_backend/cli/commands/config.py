"""``config``: the effective settings and where each one comes from (as ``pip config list``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from selector_backend.cli.commands._common import add_config_setting_argument

NAME = "config"
HELP = (
    "show the effective settings and the source of each "
    "(-C, HVD_SELECTOR_*, config file, pyproject, install record, default)"
)
PRECEDENCE = "-C > HVD_SELECTOR_* > config file > [tool.hvd-selector] > install record > default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="settings, host facts and config files as JSON")
    parser.add_argument(
        "--pyproject",
        type=Path,
        metavar="FILE",
        help="also apply [tool.hvd-selector] of this pyproject.toml, as `pip install` of that source tree does",
    )
    add_config_setting_argument(parser)


def run(args: argparse.Namespace) -> int:
    from selector_backend.cli.commands._common import settings_from_args
    from selector_backend.settings import config_file_candidates
    from selector_backend.settings.show import effective

    pyproject = None
    if args.pyproject is not None:
        from selector_backend.engine.project import read_pyproject

        pyproject = dict(read_pyproject(args.pyproject).settings_table)
    rows = effective(settings_from_args(args, pyproject=pyproject))
    files = [(path, path.is_file()) for path in config_file_candidates()]
    if args.json:
        data = {
            "precedence": PRECEDENCE,
            "settings": [
                {
                    "name": r.option.name,
                    "env": r.option.env,
                    "host_fact": r.option.host_fact,
                    "value": r.value,
                    "source": r.source,
                }
                for r in rows
            ],
            "config_files": [{"path": str(path), "read": read} for path, read in files],
        }
        print(json.dumps(data, indent=2))
        return 0
    width = max(len(r.option.name) for r in rows) + 2
    value_width = min(max(len(r.value) for r in rows), 48) + 2
    for heading, host_facts in (
        (f"settings (precedence: {PRECEDENCE}):", False),
        ("host facts (replace what detection finds; 'detected' = not set):", True),
    ):
        print(heading)
        for r in rows:
            if r.option.host_fact == host_facts:
                print(f"  {r.option.name:<{width}}{r.value:<{value_width}}{r.source}")
    print("config files (the later one wins):")
    for path, read in files:
        print(f"  {path}  ({'read' if read else 'absent'})")
    if args.pyproject is not None:
        print(f"pyproject: {args.pyproject}  ([tool.hvd-selector] {'read' if pyproject else 'absent'})")
    return 0
