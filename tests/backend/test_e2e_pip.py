"""``pip install hvd-selector`` end to end: stock pip and uv, fresh venvs, a real loopback index.

Marked slow: the session fixture builds three real variant wheels (once per source state,
build/test-wheels/); marked spread: its tests may run on both xdist workers at once.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.loopback_http import serve
from devtools.venvs import make_venv, site_packages

from .backend_helpers import (
    VariantIndex,
    build_info,
    clean_env,
    copy_index,
    pip_install,
    run,
    venv_with_dependencies,
)

pytestmark = [pytest.mark.slow, pytest.mark.spread]  # independent tests: any xdist worker (testing.md)

ALLREDUCE = """
import numpy as np, hvd_selector as hvd
hvd.init()
out = hvd.allreduce(np.arange(8, dtype=np.float32) * (hvd.rank() + 1), op=hvd.Sum)
expected = np.arange(8, dtype=np.float32) * sum(r + 1 for r in range(hvd.size()))
assert np.array_equal(out, expected), out
print(f"rank {hvd.rank()} of {hvd.size()} ok")
hvd.shutdown()
"""


def test_pip_installs_the_best_variant_for_this_machine(variant_index: VariantIndex, tmp_path: Path) -> None:
    import archspec.cpu

    if archspec.cpu.host().generic.name != "x86_64_v4":
        pytest.skip("this test's expectation is for an x86_64_v4 machine")
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    proc = pip_install(bindir, variant_index)
    assert "hvd-selector: selected prebuilt target=x86_64_v4" in proc.stdout + proc.stderr
    info = build_info(bindir)
    assert info["target"] == "x86_64_v4" and info["tensor_ops"] == "gloo"
    # a 2-rank allreduce from the installed package, through its own launcher
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    ran = run(
        [str(bindir / "hvd-selector"), "run", "-np", "2", str(bindir / "python"), str(script)],
        env=clean_env(),
        timeout=120,
    )
    assert "rank 0 of 2 ok" in ran.stdout and "rank 1 of 2 ok" in ran.stdout
    doctor = run([str(bindir / "hvd-selector"), "doctor"], env=clean_env())
    assert "ok: the installed build runs on this machine" in doctor.stdout


def test_target_override_installs_the_v3_build(variant_index: VariantIndex, tmp_path: Path) -> None:
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    trace = tmp_path / "trace.jsonl"
    env = clean_env(HVD_SELECTOR_TARGET="x86_64_v3", HVD_SELECTOR_TRACE=str(trace))
    pip_install(bindir, variant_index, env=env)
    assert build_info(bindir, env)["target"] == "x86_64_v3"
    # pip ran several hooks, each in its own process: the machine was examined once, by the first
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [e["event"] for e in events].count("plan-computed") == 1, events
    assert [e["event"] for e in events].count("plan-reused") >= 1, events
    assert len({e["pid"] for e in events}) == len(events), "each hook runs in its own process"


def test_host_profile_override_installs_the_baseline_build(variant_index: VariantIndex, tmp_path: Path) -> None:
    profile = tmp_path / "host.json"
    profile.write_text(
        '{"platform": "linux", "machine": "x86_64", "libc": "glibc 2.36", "python": "cp311",'
        ' "cpu": {"microarch": "nehalem"}}'
    )
    bindir = make_venv(tmp_path / "venv")  # bare: this install brings every runtime dependency too
    pip_install(bindir, variant_index, "-C", f"host-profile={profile}")
    assert build_info(bindir)["target"] == "x86_64"


def test_uv_gets_the_same_variant(variant_index: VariantIndex, tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    env = clean_env(UV_NO_CACHE="1")
    run([uv, "venv", "-q", str(tmp_path / "venv")], env=env)
    bindir = tmp_path / "venv" / "bin"
    run(
        [
            uv,
            "pip",
            "install",
            "--python",
            str(bindir / "python"),
            "--find-links",
            str(variant_index.wheelhouse),
            "--extra-index-url",
            variant_index.url,
            "hvd-selector",
        ],
        env=env,
        timeout=900,
    )
    pip_bindir = venv_with_dependencies(tmp_path / "pip-venv", variant_index)
    pip_install(pip_bindir, variant_index)
    assert build_info(bindir)["variant"] == build_info(pip_bindir)["variant"]


def test_tampered_wheel_fails_closed(variant_index: VariantIndex, tmp_path: Path) -> None:
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    cache = tmp_path / "cache"
    path = variant_index.published_path("x86_64_v4")
    variant_index.server.queue(path, "tamper")
    try:
        proc = pip_install(
            bindir,
            variant_index,
            env=clean_env(HVD_SELECTOR_CACHE_DIR=str(cache), HVD_SELECTOR_TARGET="x86_64_v4"),
            check=False,
        )
    finally:
        variant_index.server.plan.clear()
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sha256 mismatch" in output and "nothing was installed or cached" in output
    assert "Traceback" not in output
    shown = subprocess.run([str(bindir / "python"), "-m", "pip", "show", "hvd-selector"], capture_output=True)
    assert shown.returncode != 0
    assert [p for p in cache.rglob("*.whl")] == []


def test_flaky_server_is_retried(variant_index: VariantIndex, tmp_path: Path) -> None:
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    variant_index.server.queue("/simple/hvd-selector/", "500")
    variant_index.server.queue(variant_index.published_path("x86_64_v3"), "cut", "500")
    env = clean_env(HVD_SELECTOR_TARGET="x86_64_v3", HVD_SELECTOR_CACHE_DIR=str(tmp_path / "cache"))
    pip_install(bindir, variant_index, env=env)
    assert build_info(bindir, env)["target"] == "x86_64_v3"
    cached = list((tmp_path / "cache").rglob("*.whl"))
    assert len(cached) == 1 and not list((tmp_path / "cache").rglob("*.part"))


def test_eight_concurrent_installs_share_one_cache(variant_index: VariantIndex, tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    env = clean_env(HVD_SELECTOR_CACHE_DIR=str(cache), HVD_SELECTOR_TARGET="x86_64")
    # eight venvs copied from one that holds the runtime dependencies: the installs race on the
    # hvd-selector wheel, not on unpacking numpy eight times
    bindirs = [venv_with_dependencies(tmp_path / f"venv{i}", variant_index) for i in range(8)]
    path = variant_index.published_path("x86_64")
    before = variant_index.server.count(path)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda b: pip_install(b, variant_index, env=env, check=False), bindirs))
    failures = [r for r in results if r.returncode]
    assert not failures, failures[0].stderr[-3000:]
    assert {str(build_info(b, env)["target"]) for b in bindirs} == {"x86_64"}
    assert variant_index.server.count(path) - before == 1  # one download; seven waited on the lock
    assert len(list(cache.rglob("*.whl"))) == 1


def test_a_venv_s_installs_leave_its_template_as_it_was(variant_index: VariantIndex, tmp_path: Path) -> None:
    """make_venv hard-links its template's files into each venv (devtools.venvs): pip reinstalling a
    package there and Python compiling modules again replace the venv's files; they never write into
    the files the venv shares with the template and every other venv."""
    bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
    site = site_packages(tmp_path / "venv")
    shared = [f for d in ("packaging", "archspec") for f in (site / d).rglob("*") if f.is_file()]
    assert shared and all(f.stat().st_nlink > 1 for f in shared), "the template's files are linked"
    keep = tmp_path / "keep"  # links of our own to the shared files, to read them once the venv's are replaced
    keep.mkdir()
    for i, f in enumerate(shared):
        os.link(f, keep / str(i))
    before = {i: hashlib.sha256(f.read_bytes()).hexdigest() for i, f in enumerate(shared)}
    wheelhouse = str(variant_index.wheelhouse)
    pip = [str(bindir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index"]
    run([*pip, "--find-links", wheelhouse, "--force-reinstall", "--no-deps", "packaging"], env=clean_env())
    run([str(bindir / "python"), "-m", "compileall", "-q", "-f", str(site / "archspec")], env=clean_env())
    after = {i: hashlib.sha256((keep / str(i)).read_bytes()).hexdigest() for i in range(len(shared))}
    assert after == before
    replaced = [i for i, f in enumerate(shared) if f.exists() and not f.samefile(keep / str(i))]
    assert any(shared[i].name == "__init__.py" for i in replaced), "pip wrote packaging's files anew"
    assert any(shared[i].suffix == ".pyc" and "archspec" in shared[i].parts for i in replaced), "and compileall"


def test_no_compatible_variant_builds_the_exact_variant(variant_index: VariantIndex, tmp_path: Path) -> None:
    only_v4 = copy_index(variant_index, tmp_path / "index-v4", ("x86_64_v4",))
    with serve(only_v4) as server:
        bindir = venv_with_dependencies(tmp_path / "venv", variant_index)
        # no MPI: the exact build for this host is then the gloo one, whatever MPI this machine has
        env = clean_env(HVD_SELECTOR_TARGET="x86_64_v3", HVD_SELECTOR_MPI="none")
        proc = pip_install(bindir, variant_index, "-C", f"index-url={server.url}/simple", env=env)
    output = proc.stdout + proc.stderr
    assert "source build of target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=gloo" in output
    assert "none of the 1 prebuilt variants fits" in output
    info = build_info(bindir, env)
    assert info["target"] == "x86_64_v3"
    record = run(
        [
            str(bindir / "python"),
            "-c",
            "import importlib.metadata as m; "
            "print([str(f) for f in m.files('hvd-selector') if f.name == 'variant.json'])",
        ],
        env=env,
    )
    assert ".dist-info/variant.json" in record.stdout


HOROVOD_PROBE = """
import json, horovod.torch as hvd, hvd_selector.torch, torch
hvd.init()
print(json.dumps({"same": hvd is hvd_selector.torch, "sum": hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist()}))
hvd.shutdown()
"""


def test_the_horovod_extra_installs_from_the_published_index_alone(variant_index: VariantIndex, tmp_path: Path) -> None:
    """Issue 39 item 4: the release carries every distribution. Stock pip in a fresh venv installs
    ``hvd-selector[horovod]`` with the published index as its only index: hvd-selector (the sdist, then
    the labelled wheel), hvd-selector-horovod and the variant provider all come from it. Third-party
    dependencies come from the local wheelhouse and torch from the system, as in tests/horovod."""
    pytest.importorskip("torch")
    for project in ("hvd-selector-horovod", "hvd-selector-variant-provider"):
        assert (variant_index.root / "simple" / project / "index.json").is_file(), f"{project} is not published"
    bindir = make_venv(tmp_path / "venv", system_site_packages=True)
    run(
        [
            *(str(bindir / "python"), "-m", "pip", "install", "--no-cache-dir"),
            *("--index-url", variant_index.url, "--find-links", str(variant_index.wheelhouse)),
            "hvd-selector[horovod]",
        ],
        env=clean_env(),
        timeout=1200,
    )
    shown = run([str(bindir / "python"), "-m", "pip", "show", "hvd-selector-horovod"], env=clean_env())
    assert "Version: 0.1.0" in shown.stdout and str(tmp_path) in shown.stdout, "installed into the fresh venv"
    out = run([str(bindir / "python"), "-c", HOROVOD_PROBE], env=clean_env(), timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"same": True, "sum": [1.0, 1.0, 1.0]}
    helped = run([str(bindir / "horovodrun"), "--help"], env=clean_env())
    assert "-np" in helped.stdout
    # The provider installs from the same index (an installer that runs Python providers needs it first).
    provider = make_venv(tmp_path / "provider-venv")
    run(
        [
            *(str(provider / "python"), "-m", "pip", "install", "--no-cache-dir"),
            *("--index-url", variant_index.url, "--find-links", str(variant_index.wheelhouse)),
            "hvd-selector-variant-provider==0.1.0",
        ],
        env=clean_env(),
    )
