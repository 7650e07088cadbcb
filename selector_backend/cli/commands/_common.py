"""Options shared by every command that resolves, and how they become Settings and a Selection."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from selector_backend.cli.arguments import Argument, add_all

if TYPE_CHECKING:
    import argparse

    from selector_backend.engine.catalog import Catalog
    from selector_backend.engine.select import Selection
    from selector_backend.settings import Settings


CONFIG_SETTING = Argument(
    "-C",
    "--config-setting",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="any setting, as pip's -C (e.g. -C target=x86_64_v3); highest precedence",
)

# The options of every command that resolves.
RESOLUTION_ARGUMENTS = (
    Argument(
        "--host-profile",
        metavar="FILE",
        help="resolve for the HostProfile JSON in FILE instead of this machine (missing fields mean absent)",
    ),
    Argument(
        "--selector",
        metavar="SEL",
        help="auto (default), cpu, gpu-nvidia, and/or pins like 'tensor_ops=mpi cuda_arch=80'",
    ),
    Argument("--catalog", type=Path, metavar="FILE", help="variant catalog (default: the project's)"),
    CONFIG_SETTING,
)


def add_resolution_arguments(parser: argparse.ArgumentParser) -> None:
    add_all(parser, RESOLUTION_ARGUMENTS)


def add_config_setting_argument(parser: argparse.ArgumentParser) -> None:
    add_all(parser, (CONFIG_SETTING,))


def settings_from_args(args: argparse.Namespace, pyproject: Mapping[str, Any] | None = None) -> Settings:
    from selector_backend.errors import InputError
    from selector_backend.settings import load_settings

    cli: dict[str, str] = {}
    for item in getattr(args, "config_setting", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"-C {item!r}: expected KEY=VALUE")
        cli[key.strip()] = value
    if getattr(args, "host_profile", None):
        cli["host-profile"] = args.host_profile
    if getattr(args, "selector", None) is not None:
        cli["selector"] = args.selector
    from selector_backend.engine.reinstall import installed, recorded_settings

    return load_settings(cli, pyproject=pyproject, recorded=recorded_settings(installed()))


def catalog_from_args(args: argparse.Namespace) -> Catalog:
    from selector_backend.engine.catalog import load_catalog

    return load_catalog(getattr(args, "catalog", None))


def selection_from_args(args: argparse.Namespace) -> tuple[Settings, Catalog, Selection]:
    """Settings, catalog, then ``select`` with nothing to rank: the host and its source build.

    Bad input (settings, catalog, selector) fails before detection runs.
    """
    from selector_backend.detect import host_profile_for
    from selector_backend.engine.select import Sources, select

    settings = settings_from_args(args)
    catalog = catalog_from_args(args)
    return settings, catalog, select(settings, catalog, Sources(lambda: host_profile_for(settings)))
