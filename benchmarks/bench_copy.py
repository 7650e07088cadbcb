"""glibc memcpy vs the shared-memory transport's own copy loop, by size and alignment.

The transport copies between its buffers and the caller's arrays with
``kernels::copy`` (native/src/kernels_cpu.cpp) instead of ``memcpy``: from
2 KiB up to the L2 size glibc uses ``rep movsb``, which some CPUs (zen3 here)
run 20-30 times slower when the destination sits a few bytes past the source
modulo 4 KiB, the case of a page-aligned buffer copied into a NumPy array
(docs/reference/transport.md). This compiles benchmarks/copy_harness.cpp with
the x86_64_v3 build's flags (x86_64 where the CPU lacks them), times both per
size and destination offset, and writes benchmarks/results/copy.json. Not a test.

    python -m benchmarks.bench_copy
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCES = [
    HERE / "copy_harness.cpp",
    REPO / "native" / "src" / "kernels_cpu.cpp",
    REPO / "native" / "src" / "common.cpp",
]


def _target() -> str:
    """The target the benchmarks' gloo build uses, if this CPU runs it."""
    import archspec.cpu

    from selector_backend.engine import targets

    return "x86_64_v3" if targets.runs_on("x86_64_v3", str(archspec.cpu.host().name)) else "x86_64"


def main() -> int:
    import archspec.cpu

    target = _target()
    flags = archspec.cpu.TARGETS[target].optimization_flags("gcc", "12.2.0").split()
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "copy"
        include = [f"-I{REPO / 'native' / 'include'}", f"-I{REPO / 'native' / 'src'}"]
        subprocess.run(
            ["g++", "-O3", "-std=c++17", *flags, *include, *map(str, SOURCES), "-o", str(binary)], check=True
        )
        load = os.getloadavg()[0]
        lines = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    print(f"target {target}, 1-minute load {load:.1f}")
    print("| bytes | dst offset | memcpy GB/s | kernels::copy GB/s |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        glibc, ours = (r["bytes"] / r[key] / 1e9 for key in ("memcpy_s", "copy_s"))
        print(f"| {r['bytes']} | {r['offset']} | {glibc:.1f} | {ours:.1f} |")
    summary = {"command": "python -m benchmarks.bench_copy", "target": target, "load": round(load, 2), "rows": rows}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "copy.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
