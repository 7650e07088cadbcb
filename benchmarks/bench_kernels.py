"""Sum-reduction kernel throughput of the x86_64, x86_64_v3 and x86_64_v4 builds.

The CPU target axis is real: the core's kernels are compiled with archspec's
flags for the variant's target. This builds (or reuses) the three gloo
variants and times ``_core.benchmark_sum_kernel`` (dst = a + b over an
L2-resident buffer) for float16, bfloat16, float32 in each, best of several
runs. Writes benchmarks/results/kernels.json and kernels.png with ratios to
the x86_64 build. Not a test.

    python -m benchmarks.bench_kernels [--elements 65536]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
TARGETS = ("x86_64", "x86_64_v3", "x86_64_v4")
DTYPES = {"float16": (0, 2), "bfloat16": (1, 2), "float32": (2, 4)}

PROBE = """
import json, sys
from hvd_selector import _core
n, dtypes = int(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for name, (code, size) in dtypes.items():
    iters = 1
    while _core.benchmark_sum_kernel(code, n, iters) < 0.05:
        iters *= 2
    best = min(_core.benchmark_sum_kernel(code, n, iters) / iters for _ in range(7))
    out[name] = n / best
print(json.dumps({"kernels": _core.build_string().rsplit("kernels=", 1)[-1], "elements_per_s": out}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 16)
    args = parser.parse_args()
    from devtools import native_builds

    results = {}
    for target in TARGETS:
        defines = dict(native_builds.GLOO, HVD_TARGET=target)
        build = native_builds.build_variant(f"gloo-{target}", defines)
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, str(args.elements), json.dumps(DTYPES)],
            env=build.env(),
            cwd=RESULTS,
            capture_output=True,
            text=True,
            check=True,
        )
        results[target] = json.loads(proc.stdout)
    base = results["x86_64"]["elements_per_s"]
    for target, data in results.items():
        data["ratio_to_x86_64"] = {k: v / base[k] for k, v in data["elements_per_s"].items()}
        print(f"{target:10s} ({data['kernels']})")
        for name, rate in data["elements_per_s"].items():
            print(f"    {name:9s} {rate / 1e9:7.2f} Gelem/s  x{data['ratio_to_x86_64'][name]:.2f}")
    summary = {
        "command": "python -m benchmarks.bench_kernels " + " ".join(sys.argv[1:]),
        "elements": args.elements,
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "kernels.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(results, RESULTS / "kernels.png")
    return 0


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.25
    for i, target in enumerate(TARGETS):
        rates = [results[target]["elements_per_s"][d] / 1e9 for d in DTYPES]
        xs = [j + (i - 1) * width for j in range(len(DTYPES))]
        ax.bar(xs, rates, width, label=target)
    ax.set_xticks(range(len(DTYPES)), list(DTYPES))
    ax.set_yscale("log")
    ax.set_ylabel("sum-reduction throughput (Gelem/s, log)")
    ax.set_title("reduction kernels by build target (same machine)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
