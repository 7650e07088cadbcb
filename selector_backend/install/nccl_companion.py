"""The PEP 517 backend of ``hvd-selector-nccl``: the NCCL wheel of the build hvd-selector installs here.

``hvd-selector[gpu-nvidia]`` pins this companion. PEP 517 never tells a backend
which extras were asked for, and hvd-selector's own metadata is identical for
every variant (DESIGN.md), so the host-dependent part lives in this second
distribution, published as an sdist only (``publishing.nccl_companion``): every
install computes its dependencies on the installing host. They come from
hvd-selector's own plan (``backend.make_plan``: the same detection, ``-C``
settings, ``HVD_SELECTOR_*`` variables, config files and variant index, so the
two cannot disagree), and are the requirements of hvd-selector's extra for the
chosen build's CUDA line (``nccl_pairing.extra_for``; copied from
hvd-selector's ``pyproject.toml`` into ``[tool.hvd-selector-nccl]`` when the
companion was made), or none for a build without NCCL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector_backend.install.backend import ConfigSettings, _clean_errors

TABLE = "hvd-selector-nccl"  # the companion's [tool.*] table: {"extras": {extra: [requirement, ...]}}


def _pyproject() -> dict[str, Any]:
    from selector_backend.files.tomlfile import load_toml

    return load_toml(Path("pyproject.toml")).data


def requirements(config_settings: ConfigSettings) -> list[str]:
    """What this host's install of hvd-selector needs beside it: its build's NCCL wheel, or nothing."""
    from selector_backend.engine.nccl_pairing import extra_for
    from selector_backend.engine.variant import format_variant
    from selector_backend.install.backend import make_plan
    from selector_backend.install.console import notice

    plan = make_plan(config_settings)
    extra = extra_for(plan.variant)
    extras = _pyproject().get("tool", {}).get(TABLE, {}).get("extras", {})
    needs = [str(r) for r in extras.get(extra, [])] if extra else []
    build = f"{plan.kind} {format_variant(plan.variant)}"
    if needs:
        notice(f"[gpu-nvidia]: the {build} build loads NCCL from {', '.join(needs)}: installing it beside")
    else:
        notice(f"[gpu-nvidia]: the {build} build uses no NCCL: nothing to install beside it")
    return needs


def _metadata(config_settings: ConfigSettings) -> tuple[str, str]:
    """(the .dist-info name, METADATA) with this host's dependencies in place of ``dynamic``."""
    from selector_backend.install.metadata import core_metadata

    data = _pyproject()
    project = {k: v for k, v in data["project"].items() if k != "dynamic"}
    project["dependencies"] = requirements(config_settings)
    dist_info = f"{str(project['name']).replace('-', '_')}-{project['version']}.dist-info"
    return dist_info, core_metadata({"project": project})


WHEEL = b"Wheel-Version: 1.0\nGenerator: hvd-selector\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


@_clean_errors
def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return []  # the sdist carries the backend and what it imports (selector_backend/_vendor)


@_clean_errors
def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    from selector_backend.files.atomic import atomic_write_text

    dist_info, metadata = _metadata(config_settings)
    atomic_write_text(Path(metadata_directory) / dist_info / "METADATA", metadata)
    return dist_info


@_clean_errors
def build_wheel(
    wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: str | None = None
) -> str:
    """A wheel of metadata alone (the dependencies are the whole point)."""
    from selector_backend.install.wheel_members import write_wheel

    dist_info, metadata = _metadata(config_settings)
    name = f"{dist_info.removesuffix('.dist-info')}-py3-none-any.whl"
    files = {f"{dist_info}/METADATA": metadata.encode("utf-8"), f"{dist_info}/WHEEL": WHEEL}
    return write_wheel(Path(wheel_directory) / name, files).name
