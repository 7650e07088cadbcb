"""Thin vs fat CUDA builds: how big is the GPU part of a wheel?

Compiles the CUDA/NCCL plugin (libhvd_nccl.so, the only part of a wheel that
grows with the cuda_arch list) for (a) every thin variant of the catalog's
CUDA 13 prebuilt matrix, one arch each, and (b) one "fat" build of every arch
of the CUDA 13 line, side by side in one run with the same nvcc. Reports the
installed size (stripped, as scikit-build-core installs), the GPU code in it
(.nv_fatbin), the deflate-compressed size as it would sit in a wheel, and the
compile time, then the fat/thin ratios.

    python -m benchmarks.wheel_size            # writes benchmarks/results/wheel_size.{json,md}
    python -m benchmarks.wheel_size --jobs 2 --keep /tmp/ws
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from devtools import hvd_nccl_build
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.engine.variant import Variant, format_variant
from selector_backend.files.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
CUDA_LINE = "13"
HOST_FAMILY = "x86_64"  # host code is compiled for this machine's family


def plan(catalog: Catalog) -> list[tuple[str, Variant]]:
    """(kind, variant) for every thin CUDA 13 prebuilt variant, then the fat one."""
    thin = [v for v in catalog.prebuilt_variants() if v["cuda"] == CUDA_LINE]
    jobs: list[tuple[str, Variant]] = [("thin", v) for v in thin]
    base = next(v for v in thin if catalog.target_family[str(v["target"])] == HOST_FAMILY)
    fat = dict(base)
    fat["cuda_arch"] = catalog.cuda_lines[CUDA_LINE].archs
    jobs.append(("fat", catalog.make_variant(fat)))
    return jobs


def deflated_size(path: Path) -> int:
    """Bytes the file takes in a wheel (zip, deflate, as the wheel tools write it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(path, arcname=f"hvd_selector/{path.name}")
    with zipfile.ZipFile(buffer) as zf:
        return zf.getinfo(f"hvd_selector/{path.name}").compress_size


def measure(kind: str, variant: Variant, catalog: Catalog, work: Path, jobs: int) -> dict[str, Any]:
    archs = list(variant.values_of("cuda_arch"))
    row: dict[str, Any] = {"kind": kind, "variant": format_variant(variant), "cuda_arch": archs}
    family = catalog.target_family[str(variant["target"])]
    if family != HOST_FAMILY:
        row["skipped"] = f"{family} host code cannot be built on this {HOST_FAMILY} machine"
        return row
    built = hvd_nccl_build.build(variant, work, catalog=catalog, jobs=jobs, strip=True)
    sass, ptx = hvd_nccl_build.cubins(built.library) if hvd_nccl_build.cuobjdump() else ([], [])
    row.update(
        so_bytes=built.library.stat().st_size,
        fatbin_bytes=hvd_nccl_build.section_size(built.library, ".nv_fatbin"),
        wheel_bytes=deflated_size(built.library),
        sass=sass,
        ptx=ptx,
        configure_s=round(built.configure_s, 1),
        compile_s=round(built.build_s, 1),
    )
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    thin = [r for r in rows if r["kind"] == "thin" and "wheel_bytes" in r]
    fat = next(r for r in rows if r["kind"] == "fat")
    median_thin = statistics.median(r["wheel_bytes"] for r in thin)
    median_thin_fatbin = statistics.median(r["fatbin_bytes"] for r in thin)
    return {
        "thin_built": len(thin),
        "thin_wheel_bytes_median": median_thin,
        "thin_wheel_bytes_max": max(r["wheel_bytes"] for r in thin),
        "fat_wheel_bytes": fat["wheel_bytes"],
        "fat_over_median_thin_wheel": round(fat["wheel_bytes"] / median_thin, 2),
        "fat_over_median_thin_gpu_code": round(fat["fatbin_bytes"] / median_thin_fatbin, 2),
        "sum_of_thin_over_fat_wheel": round(sum(r["wheel_bytes"] for r in thin) / fat["wheel_bytes"], 2),
        "thin_compile_s_median": statistics.median(r["compile_s"] for r in thin),
        "fat_compile_s": fat["compile_s"],
    }


def toolchain() -> dict[str, str]:
    nvcc = hvd_nccl_build.nvcc() or "nvcc"
    banner = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.splitlines()
    release = next((line.split("release", 1)[1].strip(" ,") for line in banner if "release" in line), "?")
    nccl_dir = hvd_nccl_build.nccl_wheel_dir()
    return {
        "nvcc": f"nvcc {release}",
        "nccl_headers": str(nccl_dir) if nccl_dir else "system",
        "host": f"{platform.machine()} {platform.system()}, {_cores()} cores",
    }


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB"


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        "| build | cuda_arch | SASS | PTX | .so (stripped) | GPU code (.nv_fatbin) | in the wheel (deflate) "
        "| compile |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in report["variants"]:
        target = r["variant"].split()[0].removeprefix("target=")
        name = f"{r['kind']} ({target})"
        archs = ", ".join(r["cuda_arch"])
        if "skipped" in r:
            lines.append(f"| {name} | {archs} | | | not built: {r['skipped']} | | | |")
            continue
        lines.append(
            f"| {name} | {archs} | {', '.join(r['sass'])} | {', '.join(r['ptx'])} | {kib(r['so_bytes'])} "
            f"| {kib(r['fatbin_bytes'])} | {kib(r['wheel_bytes'])} | {r['compile_s']:.0f} s |"
        )
    lines += [
        "",
        f"A fat build is **{s['fat_over_median_thin_wheel']}x** the download of a typical thin build "
        f"({kib(s['fat_wheel_bytes'])} vs {kib(s['thin_wheel_bytes_median'])} compressed) and carries "
        f"**{s['fat_over_median_thin_gpu_code']}x** its GPU code. Publishing every thin build takes "
        f"{s['sum_of_thin_over_fat_wheel']}x the index space of one fat build. Compile time: "
        f"{s['thin_compile_s_median']:.0f} s per thin build, {s['fat_compile_s']:.0f} s for the fat one.",
        "",
        f"Measured by `python -m benchmarks.wheel_size` with {report['toolchain']['nvcc']} on "
        f"{report['toolchain']['host']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="build here and keep the builds")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wheel_size-") as scratch:
        base = args.keep or Path(scratch)
        rows = []
        for index, (kind, variant) in enumerate(plan(catalog)):
            print(f"[{index + 1}] {kind}: {format_variant(variant)}", file=sys.stderr, flush=True)
            rows.append(measure(kind, variant, catalog, base / f"{index:02d}-{kind}", args.jobs))
    report = {
        "benchmark": "wheel_size",
        "cuda_line": CUDA_LINE,
        "toolchain": toolchain(),
        "variants": rows,
        "summary": summarize(rows),
        "total_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "wheel_size.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(args.out / "wheel_size.md", markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
