"""``detect``: what this machine is, as a table or HostProfile JSON."""

from __future__ import annotations

import argparse
import json

from selector_backend.cli.commands._common import add_resolution_arguments, settings_from_args

NAME = "detect"
HELP = "detect this machine (CPU, GPUs, driver, MPI/NCCL/Gloo, os, libc, python)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the HostProfile JSON")
    parser.add_argument(
        "--targets", action="store_true", help="list every CPU target name a setting or host profile accepts"
    )
    add_resolution_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from selector_backend.detect import host_profile_for

    if args.targets:
        from selector_backend.engine.targets import target_names_by_family

        for family, names in target_names_by_family().items():
            print(f"{family}: {' '.join(names)}")
        return 0

    host = host_profile_for(settings_from_args(args))
    if args.json:
        print(json.dumps(host.to_json(), indent=2))
        return 0
    rows = [
        ("platform", f"{host.platform or '-'} / {host.os or '-'} / {host.machine or '-'}"),
        ("libc", host.libc or "-"),
        ("python", host.python or "-"),
        (
            "cpu",
            "-"
            if host.cpu is None
            else f"{host.cpu.microarch} (generic {host.cpu.generic}, {len(host.cpu.features)} features)",
        ),
        ("gpus", ", ".join(f"{g.name} [{g.compute_capability}]" for g in host.gpus) or "none"),
        ("cuda driver", host.cuda_driver or "none"),
    ]
    for name in ("mpi", "nccl", "gloo"):
        info = host.library(name)
        rows.append((name, "none" if info is None else info.describe()))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for note in host.notes:
        print(f"{'note':<{width}}  {note}")
    return 0
