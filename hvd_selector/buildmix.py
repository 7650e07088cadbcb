"""The job's build mix: ranks tell each other what they run before any data moves.

Hosts of one job differ (an x86_64_v3 node next to x86_64_v4 nodes), so ranks
may run different variants of one release: the kernels reduce in one defined
order, so results stay bitwise identical. What cannot work together (another
release or wire protocol, gloo tensor ops on one rank and mpi on another, a
rank without a Gloo controller in a Gloo rendezvous) fails at ``init()`` with
one error naming the hosts, instead of a hang or garbage later.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from typing import Any

from selector_backend.jobs.build_facts import BuildFacts
from selector_backend.jobs.rendezvous import RendezvousError

WIRE_PROTOCOL = 2  # bump when the bytes ranks exchange change meaning (2: framed TCP messages, no Gloo)
MUST_MATCH = ("release", "wire", "tensor_ops")


class IncompatibleBuildsError(RendezvousError):
    """Ranks of one job run builds that cannot work together."""


def release() -> str:
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
    set_: Callable[[str, bytes], None],
    get_many: Callable[[list[str]], list[bytes]],
    mine: dict[str, Any],
    size: int,
) -> list[dict[str, Any]]:
    """Publish this rank's build; rank 0 judges the mix once for everyone, reading every
    record in one round trip (get_many pipelines the requests)."""
    rank = int(mine["rank"])
    set_(f"build/{rank}", json.dumps(mine).encode())
    if rank == 0:
        records = [json.loads(raw) for raw in get_many([f"build/{r}" for r in range(size)])]
        set_("build/verdict", json.dumps({"error": verdict(records), "records": records}).encode())
    (raw,) = get_many(["build/verdict"])
    answer = json.loads(raw)
    if not isinstance(answer, dict) or not isinstance(answer.get("records"), list):
        raise RendezvousError("rendezvous: malformed build verdict from rank 0")
    if answer.get("error"):
        raise IncompatibleBuildsError(str(answer["error"]))
    return list(answer["records"])
