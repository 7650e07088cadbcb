"""``cmake-config``: write the build description CMake builds one variant from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "cmake-config"
HELP = "write the build description (one CMake script) for a variant; CMakeLists.txt includes it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "assignments",
        nargs="*",
        metavar="AXIS=VALUE",
        help="axis values (target=x86_64_v3 cuda_arch=80,90) or the catalog's CMake names (HVD_TARGET=...);"
        " missing axes take the catalog's defaults",
    )
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        help="file to write, atomically: a regular file or a new path (default: print it)",
    )
    parser.add_argument("--cxx", default=None, help="the C++ compiler the flags are for (default: $CXX, else c++)")
    parser.add_argument("--catalog", type=Path, default=None, help="catalog TOML (default: the project's)")


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.files.atomic import write_output
    from selector_backend.install.cmake_config import describe, parse_request, probe_compiler

    catalog = load_catalog(args.catalog)
    description = describe(parse_request(args.assignments, catalog), catalog, probe_compiler(args.cxx))
    if args.write is None:
        sys.stdout.write(description.cmake_script())
    else:
        write_output(args.write, description.cmake_script(), "the build description (--write)")
    return 0
