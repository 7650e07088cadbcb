"""Which NCCL a GPU build uses: the NCCL wheel of the build's own CUDA line.

Metadata is identical for every variant, so hvd-selector's own metadata cannot
name the right NCCL wheel. Each CUDA line has its own extra
(``gpu-nvidia-cu12`` -> ``nvidia-nccl-cu12``), and the ``gpu-nvidia`` extra
pins the companion ``hvd-selector-nccl``, an sdist whose backend requires the
extra's NCCL wheel for the build hvd-selector chooses on the installing host
(``install.nccl_companion``). The runtime loads NCCL lazily (the wheel in
site-packages, e.g. the one PyTorch installed, else the system's
libnccl.so.2), and the backend and ``doctor`` name the extra that pairs with
the build they chose or found.
"""

from __future__ import annotations

from typing import NamedTuple

from selector_backend.engine.variant import Variant

NCCL_WHEEL = {"12": "nvidia-nccl-cu12", "13": "nvidia-nccl-cu13"}


def nccl_line(dist: str) -> str | None:
    """The CUDA major line of an NCCL wheel name (``nvidia-nccl-cu12`` -> ``12``)."""
    for line, name in NCCL_WHEEL.items():
        if dist.lower() == name:
            return line
    return None


def line_extra(line: str) -> str:
    """The extra that brings the NCCL wheel of CUDA ``line`` (``13`` -> ``gpu-nvidia-cu13``)."""
    return f"gpu-nvidia-cu{line}"


def extra_for(variant: Variant) -> str | None:
    """The extra that brings this build's NCCL, or None for a build without NCCL."""
    cuda = str(variant.get("cuda", "none"))
    return line_extra(cuda) if variant.get("tensor_ops") == "nccl" and cuda in NCCL_WHEEL else None


class PairProblem(NamedTuple):
    """Why a build and the installed NCCL wheels do not work, and what repairs it."""

    reason: str
    add_extra: str | None = None  # install this extra of the installed version (it brings the NCCL wheel)
    uninstall: str | None = None  # uninstall this NCCL wheel (another line's)


def pair_problems(variant: Variant, nccl_dists: list[str], driver_cuda: str | None) -> list[PairProblem]:
    """Why ``variant`` + the installed NCCL wheels do not work on a driver (empty: they do)."""
    extra = extra_for(variant)
    if extra is None:
        return []
    cuda = str(variant.get("cuda", "none"))
    problems = []
    lines = {d: nccl_line(d) for d in nccl_dists}
    if cuda not in lines.values():
        have = ", ".join(nccl_dists) or "no NCCL wheel"
        problems.append(
            PairProblem(
                f"this cuda={cuda} build needs {NCCL_WHEEL[cuda]} (the [{extra}] extra) or a system NCCL for "
                f"CUDA {cuda}, and the environment has {have}",
                add_extra=extra,
            )
        )
    for dist, line in lines.items():
        if line is not None and line != cuda:
            problems.append(
                PairProblem(f"{dist} is NCCL for CUDA {line}, not this cuda={cuda} build's line", uninstall=dist)
            )
        if line is not None and driver_cuda is not None and int(driver_cuda.split(".")[0]) < int(line):
            problems.append(
                PairProblem(f"{dist} needs a driver for CUDA {line}.0 or newer; this driver supports {driver_cuda}")
            )
    return problems
