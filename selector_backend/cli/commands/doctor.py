"""``doctor``: does the installed build fit this machine, and if not, the commands that fix it.

pip's wheel cache keys a built wheel by the sdist alone, so a wheel built on
one machine can be reused on another (or a venv copied across machines). The
import guard stops a mismatch at import time; doctor explains it up front.
Each command it prints works as printed: this interpreter's installer, the
variant index the install recorded (``engine.reinstall``), the installed
version, and for NCCL the extra that brings it. A CPU build on a host with
NVIDIA GPUs runs, but is flagged with the GPU build that would fit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from selector_backend.cli.commands._common import add_resolution_arguments, selection_from_args

NAME = "doctor"
HELP = "check the installed hvd-selector build against this machine; print the commands that fix a mismatch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--variant-json", type=Path, metavar="FILE", help="check this variant.json instead of the installed package's"
    )
    add_resolution_arguments(parser)


def installed_variant_json(package: str) -> Path | None:
    """``package``/variant.json of the importable package (hvd_selector, or the project's), found without
    importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None  # not installed
    candidate = Path(next(iter(spec.submodule_search_locations))) / "variant.json"
    return candidate if candidate.is_file() else None


def installed_dist(catalog: Any, variant_json: Path | None) -> Any:
    """The installed distribution the fix lines name: hvd-selector's own, or the project's (its .dist-info
    beside the package that holds ``variant_json``)."""
    from selector_backend.engine.reinstall import DIST, installed

    if catalog.name == DIST:
        return installed()
    return installed(variant_json.resolve().parent, catalog.name) if variant_json is not None else None


def nccl_problems(installed: Any, host: Any) -> list[Any]:
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


def interpreter_of(variant_json: Path) -> str:
    """The Python of the environment that holds ``variant_json``: this one, or another venv's (doctor run from
    hvd-selector's environment about a project's package installed elsewhere)."""
    site = variant_json.resolve().parent.parent  # <prefix>/lib/pythonX.Y/site-packages/<package>/variant.json
    if site.name != "site-packages" or Path(sys.prefix).resolve() == site.parents[2]:
        return sys.executable
    python = site.parents[2] / "bin" / "python"
    return str(python) if python.exists() else sys.executable


def repair_command(dist: Any, variant: Any, catalog: Any, settings: list[str], python: str = sys.executable) -> str:
    """The command that installs ``variant`` the way this copy was installed.

    A copy Spack installed is rebuilt by Spack (the spec of ``variant``); pip or uv
    would write into Spack's prefix behind its back. Any other copy gets the installer
    command of ``engine.reinstall`` with ``settings`` (which lead that backend to ``variant``).
    """
    from selector_backend.engine.reinstall import reinstall_command

    if dist is not None and dist.spack_prefix is not None:
        from selector_backend.interop.spack.mapping import variant_to_spec

        return f"spack install {variant_to_spec(variant, catalog.spack_package, dist.version)}"
    return reinstall_command(dist, python, settings, dist=catalog.name)


def build_contents(build: Any) -> str | None:
    """What the installed build contains; None for a catalog without communication axes (another project's)."""
    from selector_backend.jobs.build_facts import contents

    ops = build.values_of("tensor_ops")
    return contents(ops[0], build.values_of("controllers")) if ops else None


def gpu_build_advice(selection: Any, dist: Any, catalog: Any, python: str) -> dict[str, Any] | None:
    """For a CPU build on a host with NVIDIA GPUs: the GPU build that fits, what building it needs, the command."""
    from selector_backend.engine.variant import format_variant
    from selector_backend.errors import SelectorError
    from selector_backend.install.build import missing_toolchain

    if not selection.host.nvidia_gpus() or selection.selector.wants_gpu() is False:
        return None  # no GPU, or the user's selector asks for a CPU build
    try:
        best = selection.require_source_build()
    except SelectorError:
        best = None
    if best is None or best.get("cuda", "none") == "none":
        why = selection.resolution.notes[0] if selection.resolution.notes else "no GPU build fits this host"
        return {"gpu_build": None, "needs": [], "command": None, "why": why}
    return {
        "gpu_build": format_variant(best),
        "needs": missing_toolchain(best, selection.host),
        # gpu-nvidia: the index's GPU build, else the GPU source build, never the CPU build again
        "command": repair_command(dist, best, catalog, ["selector=gpu-nvidia"], python),
        "why": None,
    }


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine import compat, variant_json
    from selector_backend.engine.project import load_project
    from selector_backend.engine.reinstall import extra_command, uninstall_command
    from selector_backend.engine.variant import format_variant
    from selector_backend.errors import EXIT_NOTHING_FITS, InputError
    from selector_backend.files.safeparse import read_bytes

    _, catalog, selection = selection_from_args(args)
    host = selection.host
    path = args.variant_json or installed_variant_json(load_project().package(catalog.namespace))
    if path is None:
        raise InputError(
            f"no installed {catalog.name} build with a variant.json was found in this environment; install it "
            f"first (docs: Installing; pip install --extra-index-url <your variant index> {catalog.name})"
        )
    dist = installed_dist(catalog, path)
    python = interpreter_of(path)
    label, build = variant_json.parse(read_bytes(path, "variant.json"), catalog, source=str(path))
    findings = compat.check_variant(build, catalog, host)
    findings = [f for f in findings if "prebuilt MPI builds use" not in f.reason] + [
        f for f in compat.check_requirements(build, catalog, host, prebuilt=False) if not f.ok
    ]
    findings = list(dict.fromkeys(findings))  # both checks name a missing GPU library: say it once
    fits = compat.compatible(findings)
    # NCCL matters where a GPU is: on a host without one, a CUDA build is reinstalled, not given NCCL
    nccl = nccl_problems(build, host) if host.nvidia_gpus() else []
    runs = fits and not nccl
    best = selection.require_source_build()
    fixes = [] if fits else [repair_command(dist, best, catalog, [], python)]
    for problem in nccl:
        if problem.add_extra and (dist is None or problem.add_extra in dist.extras):  # the project's own extras
            fixes.append(extra_command(dist, python, problem.add_extra, catalog.name))
        if problem.uninstall:
            fixes.append(uninstall_command(dist, python, problem.uninstall))
    gpu = gpu_build_advice(selection, dist, catalog, python) if runs and build.get("cuda", "none") == "none" else None
    index_recorded = dist is not None and dist.origin is not None and bool(dist.origin.index_urls)
    report: dict[str, Any] = {
        "installed": {
            "variant": build.to_json(),
            "label": label,
            "variant_json": str(path),
            "contains": build_contents(build),
            "spack_prefix": dist.spack_prefix if dist is not None else None,
        },
        "runs_here": runs,
        "reasons": [f.reason for f in findings] + [p.reason for p in nccl],
        "exact_build_for_this_machine": best.to_json(),
        "fix": fixes,
        "index_recorded": index_recorded,
        "cpu_build_on_gpu_host": gpu,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if runs else EXIT_NOTHING_FITS
    print(f"installed: {format_variant(build)} (variant {label}, {path})")
    if report["installed"]["contains"]:
        print(f"  contains: {report['installed']['contains']}")
    for finding in findings:
        print(f"  {'+' if finding.ok else '-'} {finding.reason}")
    for problem in nccl:
        print(f"  - {problem.reason}")
    if not runs:
        print("problem: the installed build does not run on this machine")
    elif gpu is not None:
        print(
            f"warning: this host has NVIDIA GPUs ({host.describe_nvidia_gpus(capability=True)}) and the installed "
            "build is a CPU build: it runs, but operations on GPU tensors raise UnavailableError"
        )
        if gpu["command"] is None:
            print(f"  {gpu['why']}")
        else:
            needs = f"; building it needs {'; '.join(gpu['needs'])}" if gpu["needs"] else ""
            print(f"  the GPU build for this machine is {gpu['gpu_build']}{needs}")
            print(f"for the GPU build: {gpu['command']}")
    else:
        print("ok: the installed build runs on this machine")
        if best != build:
            always = repair_command(dist, best, catalog, ["build-policy=always-build"], python)
            print(f"note: an exact source build for this machine would be {format_variant(best)} ({always})")
    for command in fixes:
        print(f"fix: {command}")
    if (fixes or gpu) and dist is not None and dist.spack_prefix is None and not index_recorded:
        print("note: this install recorded no variant index; add --extra-index-url with the one you installed from")
    return 0 if runs else EXIT_NOTHING_FITS
