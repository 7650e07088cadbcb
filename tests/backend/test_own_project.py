"""A project nobody here wrote, packaged end to end by the backend (docs/guide/own-project.md).

python-xxhash 3.5.0 is downloaded from PyPI as its sdist at test time (never
committed; its sha256 pinned here). It is a small C extension around the
xxHash library, whose XXH3 hashes pick their SIMD code when they are
*compiled*: ``__AVX2__`` gives the AVX2 kernel, ``__SSE2__`` the SSE2 one
(xxhash.h's XXH_VECTOR; 3.5.0 has no run-time dispatch). Its sdist is 84 kB
and builds with setuptools in about ten seconds, so three CPU targets build
on two cores in well under a minute.

The unpacked copy gets a catalog (``variants.toml``) and three pyproject
lines, nothing else; then the whole path runs: ``build-variants`` for
x86_64, x86_64_v2 and x86_64_v3 (archspec's -march flags for each), a variant
index served on 127.0.0.1, stock pip in a fresh venv installing what the
engine ranks first here and the project's own tests passing against it, uv
with wheel variants picking the same wheel without building, and a poorer CPU
(a host profile, and HVD_SELECTOR_TARGET through pip) getting the poorer build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.loopback_http import FlakyServer, serve
from devtools.venvs import make_venv

from .adopter import BACKEND_LINE, CATALOG, TABLE
from .backend_helpers import clean_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SDIST = "xxhash-3.5.0.tar.gz"
SDIST_SHA256 = "84f2caddf951c9cbf8dc2e22a89d4ccf5d86391ac6418fe81e3c67d0cf60b45f"
TARGETS = ("x86_64", "x86_64_v2", "x86_64_v3")
#: the fix doctor and the import guard print: the project's distribution, not hvd-selector
REINSTALL = "-m pip install --force-reinstall --no-deps --no-cache-dir"


def written_lines(text: str) -> int:
    """Lines a maintainer writes: neither blank nor a comment."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
        return True
    except OSError:
        return False


def adopt(project: Path) -> None:
    """What the project's maintainer adds: the catalog and the pyproject lines."""
    (project / "variants.toml").write_text(CATALOG)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert BACKEND_LINE[0] in text
    pyproject.write_text(text.replace(*BACKEND_LINE) + TABLE)


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done  # type: ignore[no-any-return]


@dataclass
class Adopted:
    project: Path
    server: FlakyServer
    wheelhouse: Path
    work: Path

    @property
    def url(self) -> str:
        return f"{self.server.url}/simple"

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment with a cache of the test's own, and no pip configuration (this machine's adds
        mirrors that hold other xxhash releases: only the variant index may answer)."""
        return clean_env(HVD_SELECTOR_CACHE_DIR=str(self.work / "cache"), PIP_CONFIG_FILE=os.devnull, **extra)

    def engine(self, *args: str, **extra: str) -> dict[str, object]:
        """``resolve --json`` of the adopted project against its index (this checkout's engine)."""
        cmd = [sys.executable, "-m", "selector_backend", "resolve", "--json", "--index-url", self.url, *args]
        done = run(cmd, cwd=self.project, env=self.env(PYTHONPATH=str(REPO), **extra))
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Adopted]:
    if not _pypi_reachable():
        pytest.skip("PyPI is unreachable: the adopted project's sdist is downloaded at test time")
    work = tmp_path_factory.mktemp("own-project")
    download = work / "download"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(download)]
    run([*cmd, "xxhash==3.5.0"])  # the caller's pip settings say how to reach PyPI
    archive = download / SDIST
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == SDIST_SHA256, "not the sdist this test pins"
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    project = work / "xxhash-3.5.0"
    adopt(project)
    site = work / "site"
    site.mkdir()
    with serve(site) as server:
        adopted = Adopted(project, server, work / "wheelhouse", work)
        cmd = [sys.executable, "-m", "selector_backend", "build-variants", "--index", str(site)]
        cmd += ["--wheelhouse", str(adopted.wheelhouse), "--index-url", adopted.url]
        run(cmd, cwd=project, env=adopted.env(PYTHONPATH=str(REPO)))
        yield adopted


def test_the_adopting_project_writes_little(adopted: Adopted) -> None:
    """The count the guide quotes: 8 catalog lines and 3 pyproject lines (one of them replaced)."""
    assert written_lines(CATALOG) == 8
    assert written_lines(TABLE) + 1 == 3


def _so_of(wheel: Path, into: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.startswith("xxhash/_xxhash") and n.endswith(".so")]
        archive.extract(name, into)
    return into / name


def test_each_target_is_compiled_with_its_own_simd(adopted: Adopted, tmp_path: Path) -> None:
    """x86_64_v3's XXH3 is the AVX2 kernel (ymm registers); the v1 and v2 builds have none."""
    by_target: dict[str, Path] = {}
    for wheel in adopted.wheelhouse.glob("*/*.whl"):
        import zipfile

        with zipfile.ZipFile(wheel) as archive:
            config = json.loads(archive.read("xxhash/build_config.json"))
        by_target[config["target"]] = wheel
    assert sorted(by_target) == sorted(TARGETS)
    ymm = {}
    for target, wheel in by_target.items():
        so = _so_of(wheel, tmp_path / target)
        listing = run(["objdump", "-d", "--no-show-raw-insn", str(so)]).stdout
        ymm[target] = listing.count("%ymm")
    assert ymm["x86_64_v3"] > 0 and ymm["x86_64"] == 0 and ymm["x86_64_v2"] == 0, ymm


def _installed_label(bindir: Path) -> str:
    (record,) = bindir.parent.glob("lib/python*/site-packages/xxhash/variant.json")
    return next(iter(json.loads(record.read_text())["variants"]))


def stock_pip(bindir: Path, url: str, *extra: str) -> list[str]:
    """``pip install`` of the adopted release from the variant index alone."""
    pip = [str(bindir / "python"), "-m", "pip", "install", "--no-cache-dir", *extra]
    return [*pip, "--index-url", url, "xxhash==3.5.0"]


def _own_tests(bindir: Path, project: Path, tmp_path: Path) -> str:
    """The project's own test suite against the installed package (run outside the source tree)."""
    tests = tmp_path / "tests"
    shutil.copytree(project / "tests", tests)
    done = run(
        [str(bindir / "python"), "-m", "unittest", "discover", "-s", str(tests), "-t", str(tmp_path)], cwd=tmp_path
    )
    return done.stderr


def test_stock_pip_installs_what_the_engine_ranks_first_and_its_tests_pass(adopted: Adopted, tmp_path: Path) -> None:
    import archspec.cpu

    ranked = adopted.engine()
    best = ranked["selected"]
    assert best is not None and best["source"] == "index"
    runnable = [t for t in TARGETS if archspec.cpu.TARGETS[t] <= archspec.cpu.host()]
    assert best["variant"]["target"] == runnable[-1]  # the most specific target this CPU runs
    bindir = make_venv(tmp_path / "venv")
    pip = stock_pip(bindir, adopted.url)
    done = run(pip, env=adopted.env(), cwd=tmp_path)
    assert _installed_label(bindir) == best["label"], done.stdout[-2000:] + done.stderr[-2000:]
    report = _own_tests(bindir, adopted.project, tmp_path)
    assert "OK" in report.splitlines()[-1], report[-2000:]
    # doctor, run in the project, reads the installed package's variant record with the project's catalog
    (record,) = bindir.parent.glob("lib/python*/site-packages/xxhash/variant.json")
    doctor = [sys.executable, "-m", "selector_backend", "doctor", "--variant-json", str(record)]
    fits = subprocess.run(
        doctor, cwd=adopted.project, env=adopted.env(PYTHONPATH=str(REPO)), capture_output=True, text=True
    )
    assert fits.returncode == 0 and "ok: the installed build runs on this machine" in fits.stdout, fits
    if best["variant"]["target"] == "x86_64_v3":  # type: ignore[index]
        poorer = adopted.env(PYTHONPATH=str(REPO), HVD_SELECTOR_TARGET="nehalem")
        misfit = subprocess.run(doctor, cwd=adopted.project, env=poorer, capture_output=True, text=True)
        assert misfit.returncode == 3 and "not an ancestor of host nehalem" in misfit.stdout, misfit
        # the fix names the venv's interpreter, the index the install recorded, the project's distribution
        fix = f"fix: {bindir / 'python'} {REINSTALL} --extra-index-url {adopted.url} xxhash==3.5.0"
        assert fix in misfit.stdout.splitlines(), misfit.stdout
        _guard_refuses_a_cpu_without_avx2(bindir, tmp_path)


def _guard_refuses_a_cpu_without_avx2(bindir: Path, tmp_path: Path) -> None:
    """The x86_64_v3 build's import guard, hooked into xxhash/__init__.py, on a nehalem's /proc/cpuinfo (bind-mounted
    in a mount namespace of this test's own): the import fails in one line instead of SIGILL in XXH3."""
    import archspec.cpu

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a mount namespace needs root and unshare")
    flags = " ".join("pni" if f == "sse3" else f for f in archspec.cpu.TARGETS["nehalem"].features)
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n")
    python = bindir / "python"
    script = f'mount --bind {tmp_path / "cpuinfo"} /proc/cpuinfo && exec {python} -c "import xxhash"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, f"the import went on (exit {refused.returncode}): {refused.stderr[-2000:]}"
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: xxhash: this build targets x86_64_v3 but this CPU lacks abm avx avx2"), (
        refused.stderr
    )
    assert last.endswith(f"reinstall the build for this machine: {python} {REINSTALL} xxhash==3.5.0"), last


def test_uv_with_wheel_variants_picks_the_same_wheel_without_building(adopted: Adopted, tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    cmd = [uv, "pip", "install", "--preview-features", "wheel-variants", "--no-cache", "--no-build"]
    cmd += ["--python", str(venv / "bin" / "python"), "--index-url", adopted.url, "xxhash==3.5.0"]
    run(cmd, env={k: v for k, v in adopted.env().items() if not k.startswith("UV_")})
    assert _installed_label(venv / "bin") == adopted.engine()["selected"]["label"]  # type: ignore[index]


def test_a_poorer_cpu_gets_the_poorer_build(adopted: Adopted, tmp_path: Path) -> None:
    """nehalem (SSE4.2, no AVX): the x86_64_v2 build, from a host profile and through pip alike."""
    profile = tmp_path / "nehalem.json"
    profile.write_text(json.dumps({"platform": "linux", "machine": "x86_64", "cpu": {"microarch": "nehalem"}}))
    ranked = adopted.engine("--host-profile", str(profile))
    poorer = ranked["selected"]
    assert poorer["variant"] == {"target": "x86_64_v2"}  # type: ignore[index]
    rejected = {c["variant"]["target"] for c in ranked["candidates"] if not c["compatible"]}  # type: ignore[index, union-attr]
    assert "x86_64_v3" in rejected
    bindir = make_venv(tmp_path / "venv")
    pip = stock_pip(bindir, adopted.url)
    run(pip, env=adopted.env(HVD_SELECTOR_TARGET="nehalem"), cwd=tmp_path)
    assert _installed_label(bindir) == poorer["label"]  # type: ignore[index]


def test_where_no_prebuilt_is_wanted_pip_builds_exactly_that_variant_with_the_projects_backend(
    adopted: Adopted, tmp_path: Path
) -> None:
    """build-policy always-build: the sdist's backend asks pip for setuptools, and builds the ranked variant."""
    from devtools.venvs import download_wheels

    house = download_wheels(tmp_path / "house", ["setuptools>=61"])  # the build requirement, without an index
    best = adopted.engine()["selected"]
    bindir = make_venv(tmp_path / "venv")
    pip = stock_pip(bindir, adopted.url, "-v", "--find-links", str(house))
    done = run(pip, env=adopted.env(HVD_SELECTOR_BUILD_POLICY="always-build"), cwd=tmp_path)
    assert "source build of target=" in done.stderr + done.stdout
    assert _installed_label(bindir) == best["label"]  # type: ignore[index]
    report = _own_tests(bindir, adopted.project, tmp_path)
    assert "OK" in report.splitlines()[-1], report[-2000:]
