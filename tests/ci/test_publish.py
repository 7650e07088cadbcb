"""The variant index publisher: contract layout, read back by the backend's reader,
idempotent, immutable names, and consistent after a crash at any step.

Most tests publish small wheels made here (a dist-info with variant.json:
all the publisher reads); one slow test builds real variants with the
project's backend and publishes them.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import venv
import zipfile
from pathlib import Path

import pytest

from selector_backend.cli.main import main
from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.engine.variant import Variant, variant_label
from selector_backend.errors import InputError
from selector_backend.install import variant_index
from selector_backend.publishing import publish

from .wheelfiles import write_wheel

ROOT = Path(__file__).resolve().parents[2]
CPU = "target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"
MPI = "target=x86_64_v4 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi frameworks=pytorch"
GPU = "target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=gloo frameworks=pytorch"


def make_wheel(
    directory: Path,
    variant: Variant,
    catalog: Catalog,
    payload: bytes = b"",
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    guard: bool = False,
) -> Path:
    """A minimal valid wheel carrying variant.json (what the build writes); with ``guard``, also the import
    guard's copy of it, so that the backend installs it (``install.build.verify_wheel_variant``)."""
    dist = f"hvd_selector-{catalog.version}"
    metadata = f"Metadata-Version: 2.1\nName: hvd-selector\nVersion: {catalog.version}\n"
    wheel_info = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files = {
        "hvd_selector/__init__.py": b"# " + payload + b"\n",
        f"{dist}.dist-info/METADATA": metadata.encode(),
        f"{dist}.dist-info/WHEEL": wheel_info.encode(),
        f"{dist}.dist-info/variant.json": variant_json.dumps(variant, catalog).encode(),
    }
    if guard:
        files["hvd_selector/variant.json"] = files[f"{dist}.dist-info/variant.json"]
    return write_wheel(directory / f"{dist}-{tag}.whl", files)


def publish_matrix(root: Path, catalog: Catalog, python: str = "cp311", guard: bool = False) -> Path:
    """The whole prebuilt matrix published under ``root/site`` as small wheels carrying the real variant
    metadata (``make_wheel``'s ``guard``: installable), one per variant, tagged for ``python`` and its machine;
    returns the index root."""
    wheels = []
    for i, variant in enumerate(catalog.prebuilt_variants()):
        family = catalog.target_family[str(variant["target"])]
        tag = f"{python}-{python}-manylinux_2_28_{family}"
        wheels.append(make_wheel(root / "in" / str(i), variant, catalog, tag=tag, guard=guard))
    publish.publish(wheels, root / "site", catalog, progress=False)
    return root / "site"


@pytest.fixture()
def catalog() -> Catalog:
    return load_catalog()


def live(site: Path) -> Path:
    """The folder of the files the live project page lists."""
    folder = publish.generation_dir(site, load_catalog())
    assert folder is not None, f"{site} has no published project page"
    return folder


def assert_consistent(root: Path, catalog: Catalog) -> list[variant_index.IndexGroup]:
    """Every file the live page lists exists with the listed sha256; the reader agrees."""
    page = root / "simple" / "hvd-selector"
    data = json.loads((page / "index.json").read_text())
    assert data["meta"]["api-version"] == "1.0"
    for item in data["files"]:
        assert publish.sha256_of(page / item["url"]) == item["hashes"]["sha256"], item["filename"]
    html = (page / "index.html").read_text()
    for item in data["files"]:
        assert f'href="{item["url"]}#sha256={item["hashes"]["sha256"]}"' in html
    return variant_index.read_index_groups(str(root / "simple"), catalog)


def wheel_count(groups: list[variant_index.IndexGroup]) -> int:
    return sum(len(group.files) for group in groups)


def test_publish_layout_and_read_back(tmp_path: Path, catalog: Catalog) -> None:
    variants = [catalog.parse_variant(v) for v in (CPU, MPI, GPU)]
    wheels = [make_wheel(tmp_path / "in" / str(i), v, catalog) for i, v in enumerate(variants)]
    done = publish.publish(wheels, tmp_path / "site", catalog, progress=False)
    assert done.changed and len(done.added) == 3
    groups = assert_consistent(tmp_path / "site", catalog)
    assert {g.variant for g in groups} == set(variants)
    for group in groups:
        assert all(filename.endswith(f"-{variant_label(group.variant)}.whl") for _, filename, *_ in group.files)
        assert group.label == variant_label(group.variant)
    index_file = json.loads((live(tmp_path / "site") / "hvd_selector-0.1.0-variants.json").read_text())
    assert set(index_file["variants"]) == {variant_label(v) for v in variants}
    # The standard providers' terms wherever they are exact; our namespace only for what no standard covers.
    gpu = index_file["variants"][variant_label(variants[2])]
    assert gpu == {
        "x86_64": {"level": ["v3"]},
        "nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["80_real", "80_virtual"]},
    }, "nccl is what a CUDA build implies"
    cpu = index_file["variants"][variant_label(variants[0])]
    # a CPU build: only where there is no NVIDIA GPU or it is asked for (a choice only our code makes)
    assert cpu == {"x86_64": {"level": ["v3"]}, "hvd_selector": {"nvidia_gpu": ["unused"]}}
    mpi = index_file["variants"][variant_label(variants[1])]
    assert mpi == {
        "x86_64": {"level": ["v4"]},
        "hvd_selector": {"tensor_ops": ["mpi"], "controllers": ["mpi"], "nvidia_gpu": ["unused"]},
    }
    assert index_file["$schema"] == variant_json.SCHEMA_URL
    assert index_file["providers"]["hvd_selector"]["requires"] == ["hvd-selector-variant-provider==0.1.0"]
    root_page = json.loads((tmp_path / "site/simple/index.json").read_text())
    assert root_page["projects"] == [{"name": "hvd-selector"}]
    # The labelled file holds the very bytes that were built (what the backend hands pip).
    assert {sha256 for g in groups for _, _, _, sha256, _ in g.files} == {publish.sha256_of(w) for w in wheels}


def test_rerun_is_idempotent_and_adding_keeps_what_was_there(tmp_path: Path, catalog: Catalog) -> None:
    site = tmp_path / "site"
    first = make_wheel(tmp_path / "a", catalog.parse_variant(CPU), catalog)
    done = publish.publish([first], site, catalog, progress=False)
    page = (site / "simple/hvd-selector/index.json").read_bytes()
    again = publish.publish([first], site, catalog, progress=False)
    assert not again.changed and again.generation == done.generation and again.added == ()
    assert (site / "simple/hvd-selector/index.json").read_bytes() == page
    second = make_wheel(tmp_path / "b", catalog.parse_variant(MPI), catalog)
    more = publish.publish([second], site, catalog, progress=False)
    assert more.changed and len(more.added) == 1
    assert wheel_count(assert_consistent(site, catalog)) == 2
    generations = list((site / "simple" / "hvd-selector").glob(publish.GENERATION_PREFIX + "*"))
    assert len(generations) == 2, "the new generation and the one a reader may still hold"
    assert not [p for p in site.rglob("*") if p.is_symlink()], "plain files: any static server, any copy"


def test_published_names_are_immutable(tmp_path: Path, catalog: Catalog) -> None:
    site = tmp_path / "site"
    variant = catalog.parse_variant(CPU)
    publish.publish([make_wheel(tmp_path / "a", variant, catalog, b"one")], site, catalog, progress=False)
    before = (site / "simple/hvd-selector/index.json").read_bytes()
    other = make_wheel(tmp_path / "b", variant, catalog, b"two")
    with pytest.raises(InputError, match=r"already published with sha256 .* published files are immutable"):
        publish.publish(
            [other, make_wheel(tmp_path / "c", catalog.parse_variant(MPI), catalog)], site, catalog, progress=False
        )
    assert (site / "simple/hvd-selector/index.json").read_bytes() == before
    assert wheel_count(assert_consistent(site, catalog)) == 1


@pytest.mark.parametrize("crash_at", ["store", "generation", "swap"])
def test_a_crash_at_any_step_leaves_a_consistent_index(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    site = tmp_path / "site"
    publish.publish([make_wheel(tmp_path / "a", catalog.parse_variant(CPU), catalog)], site, catalog, progress=False)
    new = [
        make_wheel(tmp_path / "b", catalog.parse_variant(MPI), catalog),
        make_wheel(tmp_path / "c", catalog.parse_variant(GPU), catalog),
    ]
    real_replace, real_rename = os.replace, os.rename
    calls = {"n": 0}

    def crashing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls["n"] += 1
        if (crash_at == "store" and calls["n"] == 2) or (crash_at == "swap" and Path(dst).name == "index.json"):
            raise KeyboardInterrupt("simulated crash")
        real_replace(src, dst)

    def crashing_rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if crash_at == "generation":
            raise KeyboardInterrupt("simulated crash")
        real_rename(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    monkeypatch.setattr(os, "rename", crashing_rename)
    with pytest.raises(KeyboardInterrupt):
        publish.publish(new, site, catalog, progress=False)
    monkeypatch.undo()
    groups = assert_consistent(site, catalog)
    assert [g.variant for g in groups] == [catalog.parse_variant(CPU)], "readers still see the old index"
    assert wheel_count(groups) == 1
    done = publish.publish(new, site, catalog, progress=False)
    assert done.changed and wheel_count(assert_consistent(site, catalog)) == 3


def test_progress_bar_on_a_terminal_and_lines_in_a_log() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = publish.Progress(4, "building", screen)
    for name in ("a", "b", "c", "d"):
        bar.step(name)
    frames = [frame for frame in screen.getvalue().split("\r") if frame.strip()]
    assert frames[0].startswith("building:   0%") and "0/4" in frames[0]  # tqdm's bar
    assert frames[-1].startswith("building: 100%") and "4/4" in frames[-1] and "d" in frames[-1]
    assert bar.bar is not None and bar.bar.disable  # closed after the last step
    log = io.StringIO()
    bar = publish.Progress(2, "publishing", log)
    bar.step("x.whl")
    bar.step("y.whl")
    assert log.getvalue() == "publishing 1/2: x.whl\npublishing 2/2: y.whl\n"


def test_bad_wheels_are_one_line_errors(tmp_path: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "in" / "hvd_selector-0.1.0-cp311-cp311-linux_x86_64.whl"
    plain.parent.mkdir()
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("hvd_selector-0.1.0.dist-info/METADATA", "Name: hvd-selector\n")
    assert main(["build-variants", "--publish-only", str(plain.parent), "--index", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "expected one .dist-info/variant.json, found 0" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s" / "simple").exists(), "nothing half-written"
    assert main(["build-variants", "--publish-only", str(tmp_path / "nope"), "--index", str(tmp_path / "s")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_cli_publish_only_serves_over_http(tmp_path: Path, catalog: Catalog) -> None:
    """CI's publish step, then the backend's reader over real HTTP on 127.0.0.1."""
    for i, text in enumerate((CPU, GPU)):
        make_wheel(tmp_path / "wheelhouse" / f"wheels-{i}", catalog.parse_variant(text), catalog)
    site = tmp_path / "site"
    assert main(["build-variants", "--publish-only", str(tmp_path / "wheelhouse"), "--index", str(site)]) == 0
    with serve(site) as url:
        groups = variant_index.read_index_groups(f"{url}/simple", catalog)
    assert {g.variant for g in groups} == {catalog.parse_variant(CPU), catalog.parse_variant(GPU)}
    assert all(link.startswith(url) for g in groups for _, _, link, _, _ in g.files)
    # The release's companions, each on its own page (issue 39 item 4)
    root = json.loads((site / "simple" / "index.json").read_text())
    assert {p["name"] for p in root["projects"]} == {
        "hvd-selector",
        "hvd-selector-horovod",
        "hvd-selector-variant-provider",
    }
    for project in ("hvd-selector-horovod", "hvd-selector-variant-provider"):
        page = json.loads((site / "simple" / project / "index.json").read_text())
        (item,) = page["files"]
        assert item["filename"] == f"{project.replace('-', '_')}-{catalog.version}-py3-none-any.whl"
        assert publish.sha256_of(site / "simple" / project / item["url"]) == item["hashes"]["sha256"]


def test_companions_of_another_version_or_of_the_project_itself_are_refused(tmp_path: Path, catalog: Catalog) -> None:
    other = write_wheel(tmp_path / "hvd_selector_horovod-9.9.9-py3-none-any.whl", {"x-0.dist-info/METADATA": b""})
    with pytest.raises(InputError, match=r"version 9\.9\.9 is not the release's"):
        publish.publish_companions([other], tmp_path / "site", catalog, progress=False)
    itself = write_wheel(tmp_path / f"hvd_selector-{catalog.version}-py3-none-any.whl", {"x-0.dist-info/METADATA": b""})
    with pytest.raises(InputError, match="published as variant wheels"):
        publish.publish_companions([itself], tmp_path / "site", catalog, progress=False)
    assert not (tmp_path / "site" / "simple").exists(), "nothing written"


def test_an_empty_index_url_is_one_line_exit_2(
    tmp_path: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI's publish step with the repository variable VARIANT_INDEX_URL unset."""
    make_wheel(tmp_path / "wheelhouse" / "wheels-0", catalog.parse_variant(CPU), catalog)
    argv = ["build-variants", "--publish-only", str(tmp_path / "wheelhouse"), "--index", str(tmp_path / "site")]
    assert main([*argv, "--index-url", ""]) == 2
    err = capsys.readouterr().err
    assert "--index-url is empty" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "site").exists()


@functools.lru_cache(maxsize=1)
def _quiet_handler() -> type[http.server.SimpleHTTPRequestHandler]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    return Quiet


class serve:
    """A static file server for ``root`` on 127.0.0.1 (context manager yielding its URL)."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_quiet_handler(), directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_builder_builds_repairs_and_publishes_a_reduced_matrix(
    tmp_path: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real builds with the project's backend (about 15 s per variant on 2 cores)."""
    site, house = tmp_path / "site", tmp_path / "wheelhouse"
    args = ["build-variants", "--index", str(site), "--wheelhouse", str(house), "--variant", CPU, "--variant", MPI]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "lists 3 files (2 new)" in out.out
    kept = sorted(p.name for p in house.rglob("*.whl"))
    assert len(kept) == 2 and all("manylinux_" in name for name in kept), "only repaired wheels are kept"
    groups = assert_consistent(site, catalog)
    assert {g.variant for g in groups} == {catalog.parse_variant(CPU), catalog.parse_variant(MPI)}
    for group, (_, filename, *_) in ((g, file) for g in groups for file in g.files):
        assert "manylinux_" in filename, "auditwheel repaired it"
        with zipfile.ZipFile(live(site) / filename) as archive:
            libs = [n for n in archive.namelist() if ".libs/" in n]
        if group.variant["tensor_ops"] == "mpi":
            assert not any("libmpi" in n for n in libs), "libmpi comes from the mpi extra, never the wheel"
            with zipfile.ZipFile(live(site) / filename) as archive:
                core = next(n for n in archive.namelist() if "/_core" in n and n.endswith(".so"))
                (tmp_path / "core.so").write_bytes(archive.read(core))
            needed = subprocess.run(["readelf", "-d", str(tmp_path / "core.so")], capture_output=True, text=True)
            assert "libmpich.so.12" in needed.stdout or "libmpi.so.12" in needed.stdout, "the MPICH ABI"
            assert "libmpi.so.40" not in needed.stdout
        else:
            assert any("libcrypto" in n for n in libs), "the gloo controller's libcrypto is bundled"
    # PEP 825's reference implementation accepts the real wheels and regenerates the index file from them.
    pytest.importorskip("variantlib")
    from .test_variantlib import ANALYZE, VARIANTLIB

    wheels = sorted(str(p) for p in live(site).glob("*.whl"))
    analyzed = subprocess.run([sys.executable, "-c", ANALYZE, *wheels], capture_output=True, text=True)
    assert analyzed.returncode == 0 and analyzed.stdout.count("x86_64 :: level ::") == 2, analyzed.stderr
    regen = tmp_path / "regen"
    regen.mkdir()
    for wheel in wheels:
        shutil.copy(wheel, regen)
    subprocess.run([*VARIANTLIB, "generate-index-json", "-d", str(regen)], check=True, capture_output=True)
    published = live(site) / "hvd_selector-0.1.0-variants.json"
    generated, ours = json.loads((regen / published.name).read_text()), json.loads(published.read_text())
    # variantlib writes its own $schema (which uv does not know); the rest is the same file.
    assert generated.pop("$schema") == variant_json.PREVIOUS_SCHEMA_URL
    assert ours.pop("$schema") == variant_json.SCHEMA_URL
    assert generated == ours
    assert main(args) == 0, "a re-run skips what the index already has"
    again = capsys.readouterr()
    assert "already published" in again.err and "unchanged" in again.out


@pytest.mark.slow
def test_builder_keeps_nccl_out_of_a_cuda_variant(tmp_path: Path, catalog: Catalog) -> None:
    """A real CUDA 13 + NCCL variant (about 100 s): libnccl.so.2 is linked, never grafted."""
    gpu = catalog.parse_variant(GPU)
    why = publish.why_not_buildable(gpu, catalog)
    if why:
        pytest.skip(f"cannot build a CUDA 13 variant here: {why}")
    site = tmp_path / "site"
    assert main(["build-variants", "--index", str(site), "--wheelhouse", str(tmp_path / "wh"), "--variant", GPU]) == 0
    (group,) = assert_consistent(site, catalog)
    ((_, filename, *_),) = group.files
    with zipfile.ZipFile(live(site) / filename) as archive:
        names = archive.namelist()
        plugin = next(n for n in names if n.endswith("libhvd_nccl.so"))
        (tmp_path / "plugin.so").write_bytes(archive.read(plugin))
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "plugin.so")], capture_output=True, text=True).stdout
    assert "libnccl.so.2" in needed
    assert not any("libnccl" in n or "libcuda" in n for n in names), names


def test_published_index_is_readable_by_any_user(tmp_path: Path, catalog: Catalog) -> None:
    """A static server running as another user (here: nobody) serves every file of the index."""
    variants = [catalog.parse_variant(v) for v in (CPU, GPU)]
    wheels = [make_wheel(tmp_path / "in" / str(i), v, catalog) for i, v in enumerate(variants)]
    public = Path(tempfile.mkdtemp(prefix="hvd-public-"))  # pytest's tmp root is 0700
    try:
        _check_public_index(public / "site", wheels, catalog)
    finally:
        shutil.rmtree(public)


def _check_public_index(site: Path, wheels: list[Path], catalog: Catalog) -> None:
    site.parent.chmod(0o755)
    publish.publish(wheels, site, catalog, progress=False)
    for path in [site, *site.rglob("*")]:
        if path.name == ".publish.lock" or path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o777
        want = 0o755 if path.is_dir() else 0o644
        assert mode & want == want, f"{path.relative_to(site)} has mode {oct(mode)}"
    if os.geteuid() == 0:
        page = site / "simple" / "hvd-selector"
        files = [str(page / n) for n in ("index.html", "index.json")] + [str(p) for p in live(site).glob("*.whl")]
        proc = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat", *files],
            capture_output=True,
        )
        assert proc.returncode == 0, proc.stderr.decode()


@pytest.mark.slow
def test_the_publishing_page_gives_an_index_stock_pip_and_uv_install_from(
    tmp_path: Path, run_tmp_path: Path, catalog: Catalog
) -> None:
    """docs/guide/publishing.md end to end: build-variants with --index-url, ``python -m http.server`` on
    127.0.0.1, then stock pip and uv in fresh venvs with the documented flags. The dependencies (numpy, archspec,
    ...) come from a local wheelhouse (``--find-links``) where the page lets PyPI serve them."""
    import socket

    from devtools.venvs import make_venv, shared_wheelhouse, user_env
    from tests.backend.backend_helpers import RUNTIME_DEPS

    with socket.socket() as probe:  # the URL is embedded in the sdist before the server starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/simple"
    site, house = tmp_path / "site", tmp_path / "wheelhouse"
    env = user_env(PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    baseline = "target=x86_64 tensor_ops=gloo controllers=gloo"
    cmd = [sys.executable, "-m", "selector_backend", "build-variants", "--index", str(site), "--wheelhouse", str(house)]
    built = subprocess.run([*cmd, "--variant", baseline, "--index-url", url], capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "no sdist is published" not in built.stderr
    for path in site.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file() and path.name != ".publish.lock":
            assert path.stat().st_mode & 0o644 == 0o644, f"{path} is {oct(path.stat().st_mode)}"
    deps = shared_wheelhouse(run_tmp_path, RUNTIME_DEPS)  # the pip tests' wheelhouse: one download a run
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "-d", str(site), str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port)
        pip = make_venv(tmp_path / "pip-venv")
        installed = subprocess.run(
            [
                str(pip / "pip"),
                "install",
                "--no-cache-dir",
                "--find-links",
                str(deps),
                "--extra-index-url",
                url,
                "hvd-selector",
            ],
            capture_output=True,
            text=True,
            env=user_env(),
            timeout=900,
        )
        assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
        uv_venv = tmp_path / "uv-venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(uv_venv)], check=True)
        uv = shutil.which("uv")
        assert uv is not None
        by_uv = subprocess.run(
            [
                # a CPU build: uv leaves it to the sdist's backend (wheel-variants.md), which fetches the wheel
                *(uv, "pip", "install", "--preview-features", "wheel-variants", "--no-cache"),
                *("--python", str(uv_venv / "bin" / "python"), "--index-url", url, "--find-links", str(deps)),
                "hvd-selector",
            ],
            capture_output=True,
            text=True,
            env=user_env(),
            timeout=900,
        )
        assert by_uv.returncode == 0, by_uv.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=10)
    for bindir in (pip, uv_venv / "bin"):
        info = subprocess.run(
            [str(bindir / "python"), "-c", "import hvd_selector, json; print(json.dumps(hvd_selector.build_info()))"],
            capture_output=True,
            text=True,
            env=user_env(),
            cwd=tmp_path,
        )
        assert info.returncode == 0, info.stderr[-2000:]
        assert json.loads(info.stdout.splitlines()[-1])["target"] == "x86_64", bindir


def _wait_for(port: int) -> None:
    import socket
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"python -m http.server did not listen on port {port}")


def test_a_rerun_publish_with_its_sdist_is_a_no_op_and_a_changed_sdist_fails(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-run CI publish job: the sdist is rebuilt (fresh temp names, another umask) to the same bytes,
    so publishing again changes nothing; different bytes under a published name still fail."""
    import tarfile

    pytest.importorskip("scikit_build_core")
    make_wheel(tmp_path / "wheelhouse" / "wheels-0", catalog.parse_variant(CPU), catalog)
    site = tmp_path / "site"
    argv = ["build-variants", "--publish-only", str(tmp_path / "wheelhouse"), "--index", str(site)]
    argv += ["--index-url", "http://127.0.0.1:9/simple", "--wheelhouse"]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert main([*argv, str(tmp_path / "first")]) == 0
    old_umask = os.umask(0o077)
    try:
        assert main([*argv, str(tmp_path / "second")]) == 0
    finally:
        os.umask(old_umask)
    assert "variant index unchanged" in capsys.readouterr().out
    (first,) = (tmp_path / "first" / "sdist").glob("*.tar.gz")
    (second,) = (tmp_path / "second" / "sdist").glob("*.tar.gz")
    assert first.read_bytes() == second.read_bytes()
    header = first.read_bytes()[:10]  # RFC 1952: FLG at 3 (0x08: a file name follows), MTIME at 4..8
    assert header[3] & 0x08 == 0 and int.from_bytes(header[4:8], "little") == 1700000000
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(1700000000, 0, 0, "", "")}
    assert {m.mode for m in members} <= {0o644, 0o755}

    changed = tmp_path / "changed" / first.name
    changed.parent.mkdir()
    with tarfile.open(first) as tar, tarfile.open(changed, "w:gz") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            if member.name.endswith("/README.md"):
                data += b"\nchanged\n"
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if member.isfile() else None)
    before = (site / "simple/hvd-selector/index.json").read_bytes()
    publish_changed = ["build-variants", "--publish-only", str(tmp_path / "wheelhouse"), "--index", str(site)]
    assert main([*publish_changed, "--sdist", str(changed)]) == 2
    assert "published files are immutable" in capsys.readouterr().err
    assert (site / "simple/hvd-selector/index.json").read_bytes() == before


def test_the_ci_extra_carries_every_tool_build_variants_checks_for() -> None:
    from packaging.requirements import Requirement

    from selector_backend.files.tomlfile import load_toml

    extra = load_toml(ROOT / "pyproject.toml").data["project"]["optional-dependencies"]
    ci = {Requirement(r).name: Requirement(r) for r in extra["ci"]}
    needs = publish.publishing_requirements(wheels=True, isolated=False, repair=True, sdist=True)
    for text in needs + publish.companion_requirements(ROOT):
        wanted = Requirement(text)
        assert wanted.name in ci and ci[wanted.name].specifier == wanted.specifier, text


def test_build_variants_from_an_installed_copy_says_what_to_do_and_its_dry_run_agrees(tmp_path: Path) -> None:
    """The guide's command run from an installed copy (no pyproject.toml above the package) in a venv
    without the build tools: one line, exit 2, the same for --dry-run; nothing is built."""
    import archspec
    import packaging

    site = tmp_path / "site-packages"  # what pip installs: the packages, the catalog beside them, the deps
    for package in ("selector_backend", "hvd_selector"):
        shutil.copytree(ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "variants", site / "selector_backend" / "variants")
    for dependency in (archspec, packaging):
        shutil.copytree(Path(dependency.__file__).parent, site / dependency.__name__)
    venv.EnvBuilder(with_pip=False).create(tmp_path / "venv")  # nothing else installed: no build tools
    python = tmp_path / "venv" / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": str(site)}
    for name in list(env):
        if name.startswith("HVD_SELECTOR"):
            env.pop(name)
    argv = [str(python), "-m", "selector_backend", "build-variants", "--index", str(tmp_path / "index")]
    argv += ["--variant", "target=x86_64_v3", "--wheelhouse", str(tmp_path / "wheelhouse")]
    lines = []
    for extra in ([], ["--dry-run"]):
        proc = subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        lines.append(proc.stderr)
    assert lines[0] == lines[1] and "is an installed copy: pass --source DIR" in lines[0]
    assert not (tmp_path / "wheelhouse").exists() and not (tmp_path / "index").exists()

    proc = subprocess.run(
        [*argv, "--source", str(ROOT)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "build-variants needs build>=1, scikit-build-core>=0.10" in proc.stderr
    assert f"{python} -m pip install 'build>=1' 'scikit-build-core>=0.10'" in proc.stderr


def test_a_variant_asked_for_by_name_is_labelled_as_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dry run and the progress bar name a --variant build by the flag, not by the code's word."""
    argv = ["build-variants", "--index", str(tmp_path / "site"), "--variant", "target=x86_64_v3", "--dry-run"]
    assert main(argv) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("would build --variant x86_64_v3 ") and "cli" not in line
