"""``cmake-config``: called by CMakeLists.txt to validate a variant and get its flags."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "cmake-config"
HELP = "(for CMakeLists.txt) validate axis values, write the CMake script and variant.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "assignments",
        nargs="+",
        metavar="AXIS=VALUE",
        help="one per axis, multi values comma-separated (cuda_arch=80,90)",
    )
    parser.add_argument("--out", type=Path, required=True, help="CMake script to write")
    parser.add_argument("--variant-json", type=Path, required=True, help="variant.json to write")
    parser.add_argument("--compiler-id", required=True, help="CMAKE_CXX_COMPILER_ID (GNU, Clang ...)")
    parser.add_argument("--compiler-version", required=True, help="CMAKE_CXX_COMPILER_VERSION")
    parser.add_argument("--catalog", type=Path, default=None, help="catalog TOML (default: the project's)")


def run(args: argparse.Namespace) -> int:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.install.cmake_config import write_cmake_config

    catalog = load_catalog(args.catalog)
    variant = catalog.parse_variant(" ".join(args.assignments))
    write_cmake_config(variant, catalog, args.compiler_id, args.compiler_version, args.out, args.variant_json)
    return 0
