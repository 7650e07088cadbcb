"""``pip install hvd-selector`` through the selector (prebuilt found) vs ``pip install <that wheel>``.

Both sides run in the same session, interleaved, each in a fresh virtual
environment that already holds the runtime dependencies (so only the
hvd-selector step is timed), with pip's caches off. The selector side is the
real path: stock pip fetches the sdist from a loopback variant index, builds
an isolated build environment, runs the backend's hooks (detect, read the
index, rank, download + verify, hand the wheel over) and installs. The
published sdist carries archspec, packaging and tomli in ``selector_backend/_vendor``
(imports rewritten to that package, ``selector_backend.vendored``) and declares no
build requirements (``selector_backend.install.sdist``); a second
side installs the same sdist as earlier releases shipped it (no ``_vendor``,
``requires = [packaging, archspec]``, so pip installs both into the isolated
environment first), and a third skips build isolation. The script also times
the pieces on their own, so the report says where the overhead goes.
Results: benchmarks/results/pip_install.json.

    python -m benchmarks.bench_pip_install --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from devtools.loopback_http import FlakyServer
from devtools.venvs import download_wheels, make_venv, user_env
from selector_backend.publishing.publish import build_sdist

REPO = Path(__file__).resolve().parents[1]
DEPS = ("numpy", "archspec", "packaging", "nvidia-ml-py")


def clean_env() -> dict[str, str]:
    return user_env(PIP_DISABLE_PIP_VERSION_CHECK="1")


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env or clean_env())
    return time.perf_counter() - start


def fresh_venv(path: Path, wheelhouse: Path) -> Path:
    py = make_venv(path) / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), *DEPS],
        check=True,
        env=clean_env(),
    )
    return py


def with_build_requires(sdist: Path, work: Path) -> Path:
    """The same sdist as earlier releases shipped it: no ``_vendor``, the checkout's build requirements."""
    requires = next(
        line for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("requires = [")
    )
    out = work / "sdist-requires" / sdist.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as source, tarfile.open(out, "w:gz") as dest:
        for member in source.getmembers():
            if "/selector_backend/_vendor/" in member.name:
                continue
            data = source.extractfile(member) if member.isfile() else None
            if member.name.endswith("/pyproject.toml") and member.name.count("/") == 1 and data is not None:
                text = "\n".join(
                    requires if line.startswith("requires = [") else line for line in data.read().decode().splitlines()
                )
                blob = (text + "\n").encode()
                member.size = len(blob)
                data = io.BytesIO(blob)
            dest.addfile(member, data)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wheel", type=Path, help="a variant wheel to publish (default: build the best one)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "pip_install.json")
    args = parser.parse_args()

    from selector_backend.detect import detect_host
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.policy import parse_selector
    from selector_backend.engine.resolve import ideal_variant
    from selector_backend.engine.variant import format_variant
    from selector_backend.publishing.publish import publish

    work = Path(tempfile.mkdtemp(prefix="bench-pip-"))
    catalog = load_catalog()
    variant = ideal_variant(detect_host(), catalog, parse_selector("cpu tensor_ops=gloo", catalog))
    wheel = args.wheel
    if wheel is None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                str(REPO),
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(work / "wheel"),
                "-C",
                f"variant={format_variant(variant)}",
            ],
            check=True,
        )
        (wheel,) = (work / "wheel").glob("*.whl")
    wheelhouse = work / "wheelhouse"
    download_wheels(wheelhouse, [*DEPS, "setuptools"])
    server = FlakyServer(work)  # every request answered normally: nothing is queued
    url = f"{server.url}/index/simple"
    url_with_requires = f"{server.url}/index-requires/simple"
    sdist = build_sdist(REPO, work / "sdist", url)
    publish([wheel], work / "index", catalog, sdists=[sdist], progress=False)
    publish([wheel], work / "index-requires", catalog, sdists=[with_build_requires(sdist, work)], progress=False)
    server.thread.start()

    selector_cmd = [
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-cache-dir",
        "--find-links",
        str(wheelhouse),
        "--extra-index-url",
        url,
        "hvd-selector",
    ]
    requires_cmd = [*selector_cmd[:-2], url_with_requires, "hvd-selector"]
    plain_cmd = ["-m", "pip", "install", "--no-deps", "--no-cache-dir", str(wheel)]
    # the same selector path without pip's isolated build environment (packaging and archspec are
    # already in the target venv as runtime dependencies): what the backend itself costs
    no_isolation_cmd = [*selector_cmd[:-1], "--no-build-isolation", "hvd-selector"]
    selector_times, plain_times, no_isolation_times, env_times, hook_times = [], [], [], [], []
    requires_times: list[float] = []
    hooks = (
        "import time, os; os.chdir({src!r}); t=time.perf_counter(); from selector_backend.install import backend; "
        "backend.get_requires_for_build_wheel(); backend.prepare_metadata_for_build_wheel({md!r}); "
        "backend.build_wheel({wd!r}); print(time.perf_counter()-t)"
    )
    src = work / "src"
    shutil.unpack_archive(next((work / "sdist").glob("*.tar.gz")), src)
    (src_dir,) = src.iterdir()
    # the selector side must really take the prebuilt path, or the comparison means nothing
    probe = subprocess.run(
        [str(fresh_venv(work / "venv", wheelhouse)), *selector_cmd, "-v"],
        check=True,
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    if "hvd-selector: selected prebuilt" not in probe.stdout + probe.stderr:
        raise SystemExit("the selector did not pick the published wheel; nothing to compare")
    for round_ in range(args.rounds):
        sides = [
            ("selector", selector_cmd, selector_times),
            ("plain", plain_cmd, plain_times),
            ("no-isolation", no_isolation_cmd, no_isolation_times),
            ("with-build-requires", requires_cmd, requires_times),
        ]
        for _, cmd, times in sides if round_ % 2 == 0 else reversed(sides):
            py = fresh_venv(work / "venv", wheelhouse)
            times.append(timed([str(py), *cmd]))
        # the pieces of the overhead: an isolated build env with the build requirements, and the hooks
        target = work / "buildenv"
        shutil.rmtree(target, ignore_errors=True)
        env_times.append(
            timed(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-cache-dir",
                    "--target",
                    str(target),
                    "--find-links",
                    str(wheelhouse),
                    "packaging",
                    "archspec",
                ]
            )
        )
        for d in ("md", "wd"):
            shutil.rmtree(work / d, ignore_errors=True)
            (work / d).mkdir()
        env = clean_env()
        env["HVD_SELECTOR_CACHE_DIR"] = str(work / f"hookcache{round_}")
        out = subprocess.run(
            [sys.executable, "-c", hooks.format(src=str(src_dir), md=str(work / "md"), wd=str(work / "wd"))],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        hook_times.append(float(out.stdout.strip().splitlines()[-1]))
    server.httpd.shutdown()
    server.httpd.server_close()
    med = statistics.median
    result = {
        "benchmark": "pip install hvd-selector via the selector backend (prebuilt found) vs pip install <same wheel>",
        "command": f"python -m benchmarks.bench_pip_install --rounds {args.rounds}",
        "variant": format_variant(variant),
        "rounds": args.rounds,
        "selector_median_s": med(selector_times),
        "plain_wheel_median_s": med(plain_times),
        "ratio": med(selector_times) / med(plain_times),
        "overhead_s": med(selector_times) - med(plain_times),
        "selector_with_build_requires_median_s": med(requires_times),
        "ratio_with_build_requires": med(requires_times) / med(plain_times),
        "selector_no_build_isolation_median_s": med(no_isolation_times),
        "ratio_no_build_isolation": med(no_isolation_times) / med(plain_times),
        "breakdown_median_s": {
            "installing_packaging_archspec_alone": med(env_times),
            "backend_hooks_detect_resolve_fetch_verify_copy": med(hook_times),
        },
        "samples_s": {
            "selector": selector_times,
            "plain": plain_times,
            "no_isolation": no_isolation_times,
            "with_build_requires": requires_times,
            "build_env": env_times,
            "hooks": hook_times,
        },
        "loadavg_1m": os.getloadavg()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
