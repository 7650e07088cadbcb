"""The README's main job, on this machine, with no outside service.

1. build the prebuilt-matrix variants this machine can build and run (the
   catalog's gloo entries for its CPU family) with ``hvd-selector
   build-variants`` (the project's backend + auditwheel);
2. publish them with an sdist that embeds the index's URL as its default, as
   a local variant index (a directory, read through file://);
3. ``pip install hvd-selector`` into a fresh virtual environment with stock pip
   — the backend prints what it chose and why;
4. run a 2-rank allreduce with the installed package and ``hvd-selector doctor``.

Everything lands under build/quickstart/ (the index is rebuilt on each run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALLREDUCE = """
import numpy as np, hvd_selector as hvd
hvd.init()
x = np.full(4, hvd.rank() + 1, dtype=np.float32)
y = hvd.allreduce(x, op=hvd.Sum)
assert np.array_equal(y, np.full(4, sum(range(1, hvd.size() + 1)), dtype=np.float32)), y
print(f"rank {hvd.rank()}/{hvd.size()}: allreduce {x.tolist()} -> {y.tolist()}")
hvd.shutdown()
"""


def step(message: str) -> None:
    print(f"\n== {message}", flush=True)


def sh(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, **kwargs)  # type: ignore[call-overload]


def user_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "VIRTUAL_ENV"))}


def build_local_index(work: Path, variants: list[str] | None = None) -> str:
    """Build this machine's CPU Gloo variants and an sdist into ``work/index``; return its simple URL.

    The sdist embeds the index's file:// URL as its default, as a release's
    sdist embeds the project's index. Also used once per test session by the
    docs tests (tests/docs/), which run the docs' commands against it;
    ``variants`` builds just those instead of the machine's CPU Gloo entries.
    """
    from selector_backend.detect import detect_host
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    host = detect_host()
    family = host.cpu.family if host.cpu else host.machine
    entries = [
        e.name
        for e in catalog.prebuilt
        if all(
            v["cuda"] == "none" and v["tensor_ops"] == "gloo" and catalog.target_family[str(v["target"])] == family
            for v in e.variants
        )
    ]
    index = work / "index"
    index_url = index.resolve().as_uri() + "/simple"
    shutil.rmtree(index, ignore_errors=True)
    shutil.rmtree(work / "sdist", ignore_errors=True)
    step(f"this machine: {host.cpu.microarch if host.cpu else family}; building prebuilt entries {', '.join(entries)}")
    sh(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "-o",
            str(work / "sdist"),
            "-C",
            f"index-url={index_url}",
            str(REPO),
        ],
        env=user_env(),
        stdout=subprocess.DEVNULL,
    )
    (sdist,) = (work / "sdist").glob("*.tar.gz")
    build = [
        sys.executable,
        "-m",
        "selector_backend",
        "build-variants",
        "--index",
        str(index),
        "--wheelhouse",
        str(work / "wheelhouse"),
        "--sdist",
        str(sdist),
    ]
    for entry in entries if variants is None else []:
        build += ["--entry", entry]
    for variant in variants or []:
        build += ["--variant", variant]
    sh(build, env=user_env())
    return index_url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=REPO / "build" / "quickstart")
    args = parser.parse_args()
    index_url = build_local_index(args.work)

    step(f"pip install hvd-selector from the local variant index {index_url} (stock pip, fresh venv)")
    env_dir = args.work / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bindir = env_dir / "bin"
    proc = subprocess.run(
        [
            str(bindir / "python"),
            "-m",
            "pip",
            "install",
            "-v",
            "--no-cache-dir",
            "--extra-index-url",
            index_url,
            "hvd-selector",
        ],
        text=True,
        capture_output=True,
        env=user_env(),
        cwd=env_dir,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        if "hvd-selector:" in line or "Successfully installed" in line or "ERROR" in line:
            print("   " + line.strip())
    if proc.returncode:
        print(proc.stderr[-3000:])
        return proc.returncode
    step("what was installed")
    sh([str(bindir / "hvd-selector"), "build-info"], env=user_env(), cwd=env_dir)
    sh([str(bindir / "hvd-selector"), "doctor"], env=user_env(), cwd=env_dir)
    step("2-rank allreduce with the installed package")
    script = args.work / "allreduce.py"
    script.write_text(ALLREDUCE)
    sh(
        [str(bindir / "hvd-selector"), "run", "-np", "2", str(bindir / "python"), str(script)],
        env=user_env(),
        cwd=env_dir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
