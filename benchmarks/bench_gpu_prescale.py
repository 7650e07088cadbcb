"""A 1 GiB float32 allreduce with prescale against a plain one, on one GPU.

The NCCL plugin folds a prescale of a Sum/Average into the reduction
(ncclRedOpCreatePreMulSum) instead of a separate scaling pass over the
buffer; HVD_SELECTOR_NCCL_PREMULSUM=0 (read at the plugin's init) brings the
separate pass back. This times, through the plugin's own ABI (ctypes, one
rank on GPU 0), side by side in one run: the plain allreduce, the prescaled
one folded, and the prescaled one with a separate pass, in place and out of
place, and reports each against the plain one as a ratio. Writes
benchmarks/results/gpu_prescale.json. Not a test.

At one rank NCCL's allreduce is itself at most one pass over the buffer (a
copy out of place, nothing in place), so the ratios show what scaling costs
on top of that; across ranks the folded prescale rides in NCCL's own pass,
where a separate pass would add one read and one write of the whole buffer.
Since NCCL 2.28.9's one-rank PreMulSum was seen to leave an element unscaled
(native/nccl/plan.h), the plugin no longer folds at one rank: there the two
prescaled rows run the same kernel pass, and the fold needs 2+ GPUs to time.

    python -m benchmarks.bench_gpu_prescale [--plugin LIB] [--gib 1] [--rounds 3]

Without --plugin it builds the plugin for this GPU's arch (nvcc 13 and the
nvidia-nccl-cu13 wheel needed); --plugin takes a built libhvd_nccl.so (ABI 2),
with libnccl.so.2 from the nvidia-nccl-cu13 wheel or the loader's path.
Without an NVIDIA GPU it exits 1 with one line saying so.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PREMULSUM_ENV = "HVD_SELECTOR_NCCL_PREMULSUM"


def _no_gpu() -> str | None:
    """Why there is no GPU to measure on, or None."""
    from devtools.cuda_driver import CudaDriver

    try:
        if CudaDriver(0).device_count() < 1:
            return "no CUDA device is visible"
    except (OSError, RuntimeError) as exc:
        return str(exc).splitlines()[0]
    return None


def _plugin_library(given: str | None, cc: int, work: Path) -> Path:
    """The plugin to measure: the one given, or one built here for compute capability `cc`."""
    from devtools import hvd_nccl_build

    wheel = hvd_nccl_build.nccl_wheel_dir()
    if wheel is not None:  # its libnccl.so.2 serves the plugin's DT_NEEDED wherever the plugin lies
        ctypes.CDLL(str(wheel / "lib" / "libnccl.so.2"), mode=ctypes.RTLD_GLOBAL)
    if given:
        return Path(given)
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    spec = f"target=x86_64_v3 cuda=13 cuda_arch={cc} tensor_ops=nccl controllers=gloo frameworks=pytorch"
    built = hvd_nccl_build.build(catalog.parse_variant(spec), work, catalog=catalog)
    return built.library


def _time(plugin: Any, send: int, out: int | None, n: int, prescale: float, iterations: int) -> float:
    """Best seconds per allreduce of `n` float32 over `iterations` back-to-back calls, after a warm-up."""
    plugin.allreduce(send, n, "float32", "sum", prescale=prescale, out=out)
    plugin.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        plugin.allreduce(send, n, "float32", "sum", prescale=prescale, out=out)
    plugin.synchronize()
    return (time.perf_counter() - start) / iterations


def measure(library: Path, gib: float, rounds: int, iterations: int) -> dict[str, Any]:
    from devtools.cuda_driver import CudaDriver
    from devtools.nccl_plugin_abi import Plugin

    cuda = CudaDriver(0)
    plugin = Plugin(library)
    n = int(gib * (1 << 30)) // 4
    send, recv = cuda.alloc(n * 4), cuda.alloc(n * 4)
    best: dict[str, float] = {}
    try:
        for _ in range(rounds):  # the two settings alternate, so drift hits both alike
            for folded in (True, False):
                os.environ[PREMULSUM_ENV] = "1" if folded else "0"
                plugin.init(0, 1, plugin.unique_id(), 0)
                for place, out in (("in_place", None), ("out_of_place", recv)):
                    cases = {"plain": 1.0, "prescale_folded" if folded else "prescale_separate_pass": 0.5}
                    for case, prescale in cases.items():
                        key = f"{place}/{case}"
                        seconds = _time(plugin, send, out, n, prescale, iterations)
                        best[key] = min(best.get(key, seconds), seconds)
                plugin.finalize()
    finally:
        os.environ.pop(PREMULSUM_ENV, None)
        cuda.free(send)
        cuda.free(recv)
    results: dict[str, Any] = {"versions": plugin.versions(), "compute_capability": plugin.compute_capability(0)}
    for place in ("in_place", "out_of_place"):
        plain = best[f"{place}/plain"]
        results[place] = {
            case: {
                "ms": best[f"{place}/{case}"] * 1e3,
                "GB_per_s_read_write": 2 * n * 4 / best[f"{place}/{case}"] / 1e9,
                "ratio_to_plain": best[f"{place}/{case}"] / plain if plain > 0 else None,
            }
            for case in ("plain", "prescale_folded", "prescale_separate_pass")
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default=None, help="a built libhvd_nccl.so (default: build one for this GPU)")
    parser.add_argument("--gib", type=float, default=1.0, help="buffer size in GiB (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two settings (default 3)")
    parser.add_argument("--iterations", type=int, default=10, help="allreduces timed per case and round")
    args = parser.parse_args()
    why = _no_gpu()
    if why:
        print(
            f"bench_gpu_prescale: needs an NVIDIA GPU and its driver ({why}); run it on a GPU machine",
            file=sys.stderr,
        )
        return 1
    from devtools.cuda_driver import CudaDriver

    cc = CudaDriver(0).compute_capability()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-prescale-") as work:
        library = _plugin_library(args.plugin, cc, Path(work))
        results = measure(library, args.gib, args.rounds, args.iterations)
    for place in ("in_place", "out_of_place"):
        for case, data in results[place].items():
            ratio = data["ratio_to_plain"]
            shown = f"x{ratio:.2f}" if ratio is not None else "-"
            print(f"{place:13s} {case:23s} {data['ms']:9.3f} ms  {shown} of plain")
    summary = {
        "command": "python -m benchmarks.bench_gpu_prescale " + " ".join(sys.argv[1:]),
        "gib": args.gib,
        "plugin": str(args.plugin or "built for this GPU"),
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu_prescale.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
