"""The shared-memory rule's crossover: each collective over slots and over direct reads, per size.

On one host hvd-selector moves a collective either in slot-sized pieces through
the shared segment (one meeting of all local ranks per piece, two copies per
byte) or by direct reads of the peers' memory (process_vm_readv: one copy, two
or three meetings whatever the size); the rule in native/src/shm_backend.cpp
(``Route``) switches at one output size. This runs bench_scale's hvd-selector
worker with ``HVD_SELECTOR_SHM_DIRECT=0`` (slots only) and ``=all`` (direct at
every size) in alternating jobs, ``--rounds`` times, and prints each point's
median and the ratio direct / slots (< 1: direct reads pay). hvd-selector only
(bench_scale has the peers); not a test.

    python -m benchmarks.bench_shm_pieces [--ranks 2,4,8] [--sizes 64K,128K,256K,512K,1M]
        [--rounds 3] [--iters 50] [--slot BYTES]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass

from benchmarks import bench_scale
from benchmarks.bench_allreduce import _builder

ROUTES = {"slots": "0", "direct": "all"}


@dataclass(frozen=True)
class RoutedBuild:
    """The gloo build with HVD_SELECTOR_SHM_DIRECT (and the slot size) set for every rank."""

    build: object
    direct: str
    slot: str

    def env(self, **extra: str) -> dict[str, str]:
        slot = {"HVD_SELECTOR_SHM_SLOT": self.slot} if self.slot else {}
        return self.build.env(HVD_SELECTOR_SHM_DIRECT=self.direct, **slot, **extra)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--sizes", default="64K,128K,256K,512K,1M")
    parser.add_argument("--collectives", default=",".join(bench_scale.COLLECTIVES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--slot", default="", help="HVD_SELECTOR_SHM_SLOT for both routes (default: the default)")
    args = parser.parse_args(argv)
    job = argparse.Namespace(
        size_list=[bench_scale.parse_size(s) for s in args.sizes.split(",")],
        collective_list=args.collectives.split(","),
        iters=args.iters,
        hosts=1,
        job_timeout=600,
    )
    build = _builder().build_variant("gloo-x86_64_v3", _builder().GLOO)
    seconds: dict[tuple[str, int, str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for ranks in [int(r) for r in args.ranks.split(",")]:
            routes = list(ROUTES) if round_ % 2 == 0 else list(reversed(ROUTES))
            for route in routes:
                data = bench_scale._job("hvd", "shm", ranks, job, RoutedBuild(build, ROUTES[route], args.slot))
                for row in (data or {}).get("rows", []):
                    seconds.setdefault((route, ranks, row["collective"], row["bytes"]), []).append(row["seconds"])
            print(f"round {round_ + 1}/{args.rounds}, {ranks} ranks done, load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'ranks':>5} {'collective':10} {'size':>8} {'slots ms':>9} {'direct ms':>9} {'direct/slots':>12}")
    for ranks in [int(r) for r in args.ranks.split(",")]:
        for collective in job.collective_list:
            for nbytes in job.size_list:
                median = {
                    route: statistics.median(seconds.get((route, ranks, collective, nbytes), [float("nan")]))
                    for route in ROUTES
                }
                print(
                    f"{ranks:5d} {collective:10} {bench_scale.size_label(nbytes):>8} {median['slots'] * 1e3:9.3f} "
                    f"{median['direct'] * 1e3:9.3f} {median['direct'] / median['slots']:12.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
