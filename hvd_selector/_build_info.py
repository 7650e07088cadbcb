"""build_info(): what this installation was built as (like horovodrun --check-build)."""

from __future__ import annotations

import os
from typing import Any

from selector_backend.jobs.build_facts import CONTAINS, BuildFacts, contents, network_transport


def library_versions() -> dict[str, str]:
    """The libraries the core reports at runtime, name -> version (``{"mpi": "MPICH Version: 4.0.2 ..."}``)."""
    from . import _core

    return dict(item.split("=", 1) for item in _core.library_versions().split(";") if "=" in item)


def collect(facts: BuildFacts) -> dict[str, Any]:
    """Static facts from the build plus the libraries the core reports at runtime."""
    from . import _core

    libraries = library_versions()
    gpu_reason = _core.gpu_unavailable_reason() if facts.tensor_ops == "nccl" else "CPU-only build"
    return {
        "variant": facts.config.get("variant") or " ".join(f"{k}={','.join(v)}" for k, v in facts.axes.items()),
        "variant_label": facts.label,
        "target": facts.target,
        "target_flags": facts.config.get("target_flags", ""),
        "kernels": _core.build_string().rsplit("kernels=", 1)[-1],
        "tensor_ops": facts.tensor_ops,
        "controllers": list(facts.controllers),
        # What the build contains: "gloo" is the value's name, "tcp" what it is (no Gloo library is linked).
        "contains": contents(facts.tensor_ops, facts.controllers),
        "network_transport": network_transport(facts.controllers),
        "cuda": facts.axis("cuda")[0] if facts.axis("cuda") else "none",
        "cuda_archs": list(facts.cuda_archs),
        "frameworks": list(facts.axis("frameworks")),
        "libraries": libraries,
        "mpiexec": facts.config.get("mpiexec", ""),
        "compiler": facts.config.get("compiler", ""),
        "fusion_threshold": int(_core.fusion_threshold()),
        "gpu_operations": "available" if not gpu_reason else f"unavailable: {gpu_reason}",
        # How ranks exchange data once init() ran (shm within a host; "" before).
        "transport": _core.transport()
        or "not initialised (HVD_SELECTOR_SHM=" + (os.environ.get("HVD_SELECTOR_SHM") or "1") + ")",
    }


def format_text(info: dict[str, Any]) -> str:
    """Human-readable, one fact per line, in horovodrun --check-build's spirit."""

    def mark(flag: bool) -> str:
        return "[X]" if flag else "[ ]"

    ops = info["tensor_ops"]
    lines = [
        f"hvd-selector build {info['variant_label']}: {info['variant']}",
        "",
        f"CPU target: {info['target']} (flags: {info['target_flags'] or 'none'}; kernels: {info['kernels']})",
        "",
        "Available frameworks:",
        *(f"    [X] {f}" for f in info["frameworks"]),
        "",
        "Available controllers:",
        f"    {mark('mpi' in info['controllers'])} MPI",
        f"    {mark('gloo' in info['controllers'])} {CONTAINS['gloo']}",
        "",
        "Available tensor operations:",
        f"    {mark(ops == 'nccl')} NCCL (cuda={info['cuda']}, cuda_arch={','.join(info['cuda_archs']) or 'none'})",
        f"    {mark(ops == 'mpi')} MPI",
        # tensor_ops=gloo, and the CPU tensors of an NCCL build: the gloo controller's TCP mesh
        f"    {mark(ops == 'gloo' or (ops == 'nccl' and 'gloo' in info['controllers']))} {CONTAINS['gloo']}",
        "",
        "Libraries: " + (", ".join(f"{k} {v}" for k, v in info["libraries"].items()) or "none"),
        f"GPU operations: {info['gpu_operations']}",
        f"Fusion threshold: {info['fusion_threshold']} bytes",
        f"Network transport: {info['network_transport']} (between ranks that share no memory)",
        f"Transport: {info['transport']}",
    ]
    if info["mpiexec"]:
        lines.append(f"mpiexec: {info['mpiexec']}")
    return "\n".join(lines)
