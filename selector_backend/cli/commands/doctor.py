"""``doctor``: does the installed build fit this machine, and if not, the one fixing command.

pip's wheel cache keys a built wheel by the sdist alone, so a wheel built on
one machine can be reused on another (or a venv copied across machines). The
import guard stops a mismatch at import time; doctor explains it up front.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from selector_backend.cli.commands._common import add_resolution_arguments, selection_from_args

NAME = "doctor"
HELP = "check the installed hvd-selector build against this machine; print the command that fixes a mismatch"
REINSTALL = "pip install --no-cache-dir --force-reinstall hvd-selector"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--variant-json", type=Path, metavar="FILE", help="check this variant.json instead of the installed package's"
    )
    add_resolution_arguments(parser)


def installed_variant_json() -> Path | None:
    """hvd_selector/variant.json of the importable package, found without importing it."""
    from selector_backend.jobs.build_facts import runtime_package_dir

    try:
        candidate = runtime_package_dir() / "variant.json"
    except ImportError:  # hvd_selector is not installed
        return None
    return candidate if candidate.is_file() else None


def nccl_problems(installed: Any, host: Any) -> list[str]:
    """An NCCL build needs the NCCL wheel of its CUDA line (or a system NCCL); see nccl_pairing."""
    from selector_backend.detect.libraries import installed_wheels
    from selector_backend.engine.nccl_pairing import NCCL_WHEEL, extra_for, pair_problems

    if extra_for(installed) is None:
        return []
    wheels = [d for d in NCCL_WHEEL.values() if d in installed_wheels()]
    nccl = host.library("nccl")
    if not wheels and nccl is not None and nccl.location and "site-packages" not in nccl.location:
        return []  # a system NCCL: its CUDA line is the administrator's choice
    return pair_problems(installed, wheels, host.cuda_driver)


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine import compat, variant_json
    from selector_backend.engine.variant import format_variant
    from selector_backend.errors import EXIT_NOTHING_FITS, InputError
    from selector_backend.files.safeparse import read_bytes

    _, catalog, selection = selection_from_args(args)
    host = selection.host
    path = args.variant_json or installed_variant_json()
    if path is None:
        raise InputError(
            "no installed hvd-selector build with a variant.json was found in this environment; "
            f"install it first: {REINSTALL}"
        )
    label, installed = variant_json.parse(read_bytes(path, "variant.json"), catalog, source=str(path))
    findings = compat.check_variant(installed, catalog, host)
    findings = [f for f in findings if "prebuilt MPI builds use" not in f.reason] + [
        f for f in compat.check_requirements(installed, catalog, host, prebuilt=False) if not f.ok
    ]
    nccl = nccl_problems(installed, host)
    runs = compat.compatible(findings) and not nccl
    best = selection.require_source_build()
    report: dict[str, Any] = {
        "installed": {"variant": installed.to_json(), "label": label, "variant_json": str(path)},
        "runs_here": runs,
        "reasons": [f.reason for f in findings] + nccl,
        "exact_build_for_this_machine": best.to_json(),
        "fix": None if runs else REINSTALL,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"installed: {format_variant(installed)} (variant {label}, {path})")
        for finding in findings:
            print(f"  {'+' if finding.ok else '-'} {finding.reason}")
        for problem in nccl:
            print(f"  - {problem}")
        if not runs:
            print("problem: the installed build does not run on this machine")
        else:
            print("ok: the installed build runs on this machine")
            if best != installed:
                print(
                    f"note: an exact source build for this machine would be {format_variant(best)} "
                    "(pip install --no-cache-dir --force-reinstall hvd-selector -C build-policy=always-build)"
                )
        if report["fix"]:
            print(f"fix: {REINSTALL}")
    return 0 if runs else EXIT_NOTHING_FITS
