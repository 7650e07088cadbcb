"""The job's build mix: ranks tell each other what they run before any data moves.

Hosts of one job differ (an x86_64_v3 node next to x86_64_v4 nodes), so ranks
may run different variants of one release: the kernels reduce in one defined
order, so results stay bitwise identical. What cannot work together (another
release or wire protocol, gloo tensor ops on one rank and mpi on another, a
rank without a Gloo controller in a Gloo rendezvous) fails at ``init()`` with
one error naming the hosts, instead of a hang or garbage later.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from selector_backend.jobs.build_facts import BuildFacts
from selector_backend.jobs.rendezvous import RendezvousError

WIRE_PROTOCOL = 2  # bump when the bytes ranks exchange change meaning (2: framed TCP messages, no Gloo)
MUST_MATCH = ("release", "wire", "tensor_ops")


class IncompatibleBuildsError(RendezvousError):
    """Ranks of one job run builds that cannot work together."""


@functools.cache
def release() -> str:
    """This installation's release. An installed wheel's dist-info sits beside the package: reading
    it is one directory listing, where importlib.metadata scans every sys.path entry (about 12 ms
    the first time, a third of a rank's CPU in init())."""
    for info in Path(__file__).resolve().parent.parent.glob("hvd_selector-*.dist-info"):
        with contextlib.suppress(OSError):
            for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line:
                    break  # the headers ended without a version: ask importlib.metadata
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("hvd-selector")
    except (ImportError, PackageNotFoundError):
        return "0.1.0"  # a staged source build: the tree's version


def record(facts: BuildFacts, rank: int, host: str | None = None) -> dict[str, Any]:
    """What one rank tells the others (JSON, no pickles)."""
    return {
        "rank": rank,
        "host": host or socket.gethostname(),
        "release": release(),
        "wire": WIRE_PROTOCOL,
        "variant": facts.label,
        "target": facts.target,
        "tensor_ops": facts.tensor_ops,
        "controllers": ",".join(facts.controllers),
    }


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(str(r) for r in sorted(ranks))


def verdict(records: Sequence[dict[str, Any]]) -> str:
    """'' when the builds can run one job, else the one-line reason naming hosts and ranks."""
    problems = []
    bad_controller = [r for r in records if "gloo" not in str(r.get("controllers", "")).split(",")]
    if bad_controller:
        where = "; ".join(f"rank {r['rank']} on {r['host']} ({r['controllers']})" for r in bad_controller)
        problems.append(f"no gloo controller to join this rendezvous: {where}")
    for field in MUST_MATCH:
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            groups.setdefault(str(r.get(field)), []).append(r)
        if len(groups) > 1:
            parts = []
            for value, members in sorted(groups.items(), key=lambda kv: min(m["rank"] for m in kv[1])):
                hosts = ",".join(sorted({str(m["host"]) for m in members}))
                parts.append(f"{value} on {hosts} (ranks {_ranks([m['rank'] for m in members])})")
            problems.append(f"{field} differs: " + " vs ".join(parts))
    if not problems:
        return ""
    return (
        "incompatible builds in this job: "
        + "; ".join(problems)
        + ". Every rank needs the same release, wire protocol and tensor_ops (targets may differ)"
    )


def format_mix(records: Sequence[dict[str, Any]]) -> str:
    """One line per (host, build): what ``hvd-selector run --check`` prints."""
    rows: dict[tuple[str, ...], list[int]] = {}
    for r in records:
        fields = ("host", "release", "wire", "variant", "target", "tensor_ops", "controllers")
        key = tuple(str(r[f]) for f in fields)
        rows.setdefault(key, []).append(int(r["rank"]))
    lines = [f"job of {len(records)} ranks:"]
    for (host, rel, wire, variant, target, ops, ctl), ranks in sorted(rows.items(), key=lambda kv: min(kv[1])):
        lines.append(
            f"  {host}: ranks {_ranks(ranks)}  release {rel}  wire {wire}  variant {variant}  "
            f"target={target} tensor_ops={ops} controllers={ctl}"
        )
    lines.append("compatible: " + ("yes" if not verdict(records) else "no"))
    return "\n".join(lines)


def exchange(
    gather: Callable[[str, int, int, bytes], list[bytes]],
    mine: dict[str, Any],
    size: int,
) -> list[dict[str, Any]]:
    """Publish this rank's build and read every rank's in one gather (one store round trip); every
    rank judges the same records with the same rule, so all raise the same error or none does."""
    rank = int(mine["rank"])
    try:
        records = [json.loads(raw) for raw in gather("build/", rank, size, json.dumps(mine).encode())]
    except ValueError:
        raise RendezvousError("rendezvous: a rank published a malformed build record") from None
    if not all(isinstance(r, dict) for r in records):
        raise RendezvousError("rendezvous: a rank published a malformed build record")
    error = verdict(records)
    if error:
        raise IncompatibleBuildsError(error)
    return records
