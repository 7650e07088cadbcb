"""Publishing variant wheels as a variant index (what ``variant_index`` reads).

Layout under the index root (pass the root's ``simple/`` to pip-style readers):

    simple/index.html, simple/index.json          PEP 503 / PEP 691 root
    simple/<project>/index.html                    PEP 503 project page (#sha256=), links g-<id>/<file>
    simple/<project>/index.json                    PEP 691 JSON project page
    simple/<project>/g-<id>/<labelled wheels>, <sdist>, <name>-<ver>-variants.json
    .store/<sha256>                                every published file, once

Plain files and directories only (no symbolic links), world-readable, so
any static server serves it, and a copy of the tree is an index. A project
page and the files it lists change together: each run builds a complete new
generation directory (files are hard links into the content store), then
replaces each page file in one rename. A page, old or new, links only
files of a complete generation that is still there (the previous one is
kept), whether the run finished or crashed. A published file name is
immutable: offering different bytes under it is an error.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.variant import Variant, variant_label
from selector_backend.engine.wheelname import labelled_filename, parse_wheel_name
from selector_backend.errors import InputError, IntegrityError
from selector_backend.files.archives import open_zip
from selector_backend.files.atomic import atomic_write_text
from selector_backend.install.fetch import file_lock, sha256_of
from selector_backend.install.wheelcheck import read_member

PEP691_VERSION = "1.0"
GENERATION_PREFIX = "g-"
OLD_GENERATIONS = ".generations"  # the symlinked layout of earlier releases, migrated on the next publish
STORE = ".store"
PAGES = ("index.json", "index.html")  # JSON first: the format readers ask for first
# A published index is public by intent: any static server, run as any user, serves it.
PUBLIC_FILE = 0o644
PUBLIC_DIR = 0o755


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def variants_filename(catalog: Catalog, version: str) -> str:
    """``{name}-{version}-variants.json`` with the wheel filename's normalised name (PEP 825)."""
    return f"{normalize(catalog.name).replace('-', '_')}-{version}-variants.json"


def variants_document(variants: Iterable[Variant], catalog: Catalog) -> dict[str, Any]:
    """The ``-variants.json`` of one version: every variant's own variant.json entry, merged."""
    merged: dict[str, Any] = {}
    for variant in variants:
        doc = variant_json.render(variant, catalog)
        if not merged:
            merged = {**variant_json.header(catalog), "variants": {}}
        merged["variants"].update(doc["variants"])
    return merged


@dataclass(frozen=True)
class VariantWheel:
    """A wheel checked against the catalog: its variant comes from its own variant.json."""

    path: Path
    label: str
    variant: Variant
    version: str
    sha256: str

    @property
    def published_name(self) -> str:
        return labelled_filename(self.path.name, self.label)


def inspect_wheel(path: Path, catalog: Catalog) -> VariantWheel:
    """Read and check a wheel's ``*.dist-info/variant.json``; anything off is an InputError."""
    wheel = parse_wheel_name(path.name)
    if normalize(wheel.name) != normalize(catalog.name):
        raise InputError(f"{path.name}: not a {catalog.name} wheel")
    with open_zip(path, str(path), error=InputError, what="wheel") as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        if len(names) != 1:
            raise InputError(
                f"{path.name}: expected one .dist-info/variant.json, found {len(names)}; "
                "build it with the project's backend (-C variant=...)"
            )
        try:
            text = read_member(archive, names[0])
        except IntegrityError as exc:
            raise InputError(str(exc)) from None
        label, variant = variant_json.parse(text, catalog, source=f"{path.name}:{names[0]}")
    if label != variant_label(variant):
        raise InputError(
            f"{path.name}: variant.json labels its variant {label!r}, "
            f"but its properties give {variant_label(variant)!r}"
        )
    if wheel.label is not None and wheel.label != label:
        raise InputError(f"{path.name}: file name label {wheel.label!r} disagrees with variant.json ({label!r})")
    return VariantWheel(path, label, variant, wheel.version, sha256_of(path))


# ------------------------------------------------------------------ progress
class Progress:
    """Progress of a batch: tqdm's bar on a terminal (the ``ci`` extra); on a log, or without
    tqdm, one plain line a step, which CI logs keep readable."""

    def __init__(self, total: int, what: str, stream: IO[str] | None = None) -> None:
        self.total, self.what, self.done = total, what, 0
        self.stream = stream or sys.stderr
        self.bar: Any = None
        if self.stream.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, desc=what, unit="file", file=self.stream, dynamic_ncols=True)

    def step(self, item: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(item[-48:], refresh=False)
            self.bar.update(1)
            if self.done == self.total:
                self.bar.close()
            return
        self.stream.write(f"{self.what} {self.done}/{self.total}: {item}\n")
        self.stream.flush()


# ------------------------------------------------------------------ the index
@dataclass(frozen=True)
class Published:
    """What one publish run left behind."""

    project_dir: Path
    generation: str
    files: tuple[str, ...]
    added: tuple[str, ...]
    changed: bool


def _store_file(store: Path, source: Path, sha256: str) -> Path:
    """Copy ``source`` into the content store (atomically; a no-op when present)."""
    target = store / sha256
    if target.exists():
        return target
    store.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=store, prefix=".in.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        if sha256_of(Path(tmp)) != sha256:
            raise InputError(f"{source} changed while it was being published; run again")
        os.chmod(tmp, PUBLIC_FILE)  # any static server (another user) must read it
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _project_page_html(project: str, files: Sequence[tuple[str, str]], folder: str = "") -> str:
    links = "\n".join(
        f'    <a href="{html.escape(folder + name)}#sha256={sha}">{html.escape(name)}</a><br>' for name, sha in files
    )
    return (
        f'<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" '
        f'content="{PEP691_VERSION}">\n    <title>Links for {html.escape(project)}</title>\n'
        f"  </head>\n  <body>\n    <h1>Links for {html.escape(project)}</h1>\n{links}\n  </body>\n</html>\n"
    )


def project_page_json(project: str, files: Sequence[tuple[str, str]], folder: str = "") -> str:
    data = {
        "meta": {"api-version": PEP691_VERSION},
        "name": project,
        "files": [{"filename": name, "url": folder + name, "hashes": {"sha256": sha}} for name, sha in files],
    }
    return json.dumps(data, indent=2) + "\n"


def _root_pages(simple: Path, projects: Iterable[str]) -> None:
    names = sorted(set(projects))
    body = "\n".join(f'    <a href="{p}/">{p}</a><br>' for p in names)
    atomic_write_text(
        simple / "index.html", "<!DOCTYPE html>\n<html>\n  <body>\n" + body + "\n  </body>\n</html>\n", PUBLIC_FILE
    )
    atomic_write_text(
        simple / "index.json",
        json.dumps({"meta": {"api-version": PEP691_VERSION}, "projects": [{"name": p} for p in names]}, indent=2)
        + "\n",
        PUBLIC_FILE,
    )


def publish(
    wheels: Sequence[Path], index_root: Path, catalog: Catalog, *, sdists: Sequence[Path] = (), progress: bool = True
) -> Published:
    """Add ``wheels`` (and sdists) to the variant index at ``index_root``.

    Re-running with the same files changes nothing; a file name already
    published with other bytes is refused before anything is written. One
    publisher at a time (a lock file serializes concurrent runs).
    """
    index_root.mkdir(parents=True, exist_ok=True)
    with file_lock(index_root / ".publish.lock"):
        return _publish_locked(wheels, index_root, catalog, sdists, progress)


def _publish_locked(
    wheels: Sequence[Path], index_root: Path, catalog: Catalog, sdists: Sequence[Path], progress: bool
) -> Published:
    new: list[_Entry] = []
    for path in wheels:
        info = inspect_wheel(path, catalog)
        if info.version != catalog.version:
            raise InputError(f"{path.name}: version {info.version} is not the catalog's {catalog.version}")
        new.append((info.published_name, info.sha256, path, info))
    for path in sdists:
        if not path.name.endswith(".tar.gz"):
            raise InputError(f"{path.name}: an sdist must be a .tar.gz")
        new.append((path.name, sha256_of(path), path, None))

    def existing(path: Path) -> tuple[str, VariantWheel | None] | None:
        if path.name.endswith(".whl"):
            info = inspect_wheel(path, catalog)
            return info.sha256, info
        return (sha256_of(path), None) if path.name.endswith(".tar.gz") else None

    def variants_files(entries: dict[str, _Entry]) -> dict[str, str]:
        """The variants file per version: every labelled wheel, from its own variant.json."""
        by_version: dict[str, list[Variant]] = {}
        for _name, _sha, _path, published in sorted(entries.values(), key=lambda e: e[0]):
            if published is not None:
                by_version.setdefault(published.version, []).append(published.variant)
        return {
            variants_filename(catalog, v): json.dumps(variants_document(vs, catalog), indent=2, sort_keys=True) + "\n"
            for v, vs in sorted(by_version.items())
        }

    return _publish_project(index_root, normalize(catalog.name), new, existing, variants_files, progress)


# (published name, sha256, a path holding those bytes, the wheel's variant if a variant wheel)
_Entry = tuple[str, str, Path, "VariantWheel | None"]


def publish_companions(
    dists: Sequence[Path], index_root: Path, catalog: Catalog, *, progress: bool = True
) -> list[Published]:
    """Publish the release's other distributions (``companion_dists``), each on its own project page.

    They are plain wheels and sdists: no variant.json, no label, their standard names.
    Each must be of the catalog's version (the release's extras pin ``==version``) and of
    another project than the catalog's; every file is checked before anything is written.
    """
    by_project: dict[str, list[_Entry]] = {}
    for path in dists:
        project, version = _dist_name_version(path)
        if project == normalize(catalog.name):
            raise InputError(f"{path.name}: {catalog.name} itself is published as variant wheels, not as a companion")
        if version != catalog.version:
            raise InputError(f"{path.name}: version {version} is not the release's {catalog.version}")
        by_project.setdefault(project, []).append((path.name, sha256_of(path), path, None))
    index_root.mkdir(parents=True, exist_ok=True)

    def plain(path: Path) -> tuple[str, VariantWheel | None] | None:
        return (sha256_of(path), None) if path.name.endswith((".whl", ".tar.gz")) else None

    with file_lock(index_root / ".publish.lock"):
        for project, new in sorted(by_project.items()):  # immutability, checked for all before any write
            _check_immutable(_current_entries(index_root / "simple" / project, plain), new)
        return [
            _publish_project(index_root, project, new, plain, lambda _entries: {}, progress)
            for project, new in sorted(by_project.items())
        ]


def _dist_name_version(path: Path) -> tuple[str, str]:
    """The normalised project name and version a wheel's or sdist's file name gives."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    try:
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
        elif path.name.endswith(".tar.gz"):
            name, version = parse_sdist_filename(path.name)
        else:
            raise InputError(f"{path.name}: a distribution must be a .whl or a .tar.gz")
    except (InvalidWheelFilename, InvalidSdistFilename) as exc:
        raise InputError(f"{path.name}: not a distribution file name ({exc})") from None
    return normalize(name), str(version)


def _current_entries(
    page_dir: Path, existing: Callable[[Path], tuple[str, VariantWheel | None] | None]
) -> dict[str, _Entry]:
    """The files of the generation the project page links now, by published name."""
    current = _live_generation(page_dir)
    entries: dict[str, _Entry] = {}
    if current is not None:
        for path in sorted(current.iterdir()):
            known = existing(path)
            if known is not None:
                entries[path.name] = (path.name, known[0], path, known[1])
    return entries


def _check_immutable(entries: dict[str, _Entry], new: Sequence[_Entry]) -> list[str]:
    """Names new to the page; a published name offered with other bytes is an InputError."""
    added = []
    for name, sha, path, _ in new:
        if name in entries and entries[name][1] != sha:
            raise InputError(
                f"{name} is already published with sha256 {entries[name][1][:12]}..., but {path} "
                f"has {sha[:12]}...; published files are immutable: bump the version"
            )
        if name not in entries:
            added.append(name)
    return added


def _publish_project(
    index_root: Path,
    project: str,
    new: Sequence[_Entry],
    existing: Callable[[Path], tuple[str, VariantWheel | None] | None],
    extra_files: Callable[[dict[str, _Entry]], dict[str, str]],
    progress: bool,
) -> Published:
    """One project page: the live generation's files plus ``new`` (checked), plus ``extra_files``
    (written text, such as the variants file), as a new complete generation; each page in one rename."""
    simple = index_root / "simple"
    page_dir = simple / project
    store = index_root / STORE
    current = _live_generation(page_dir)
    if page_dir.is_symlink():  # an earlier release's layout: its live generation is carried over
        old = page_dir.resolve()
        page_dir.unlink()
        page_dir.mkdir(mode=PUBLIC_DIR)
        current = None
        if old.is_dir():
            current = page_dir / (GENERATION_PREFIX + old.name.removeprefix(GENERATION_PREFIX))
            os.rename(old, current)
        shutil.rmtree(simple / OLD_GENERATIONS, ignore_errors=True)
    elif current is None and page_dir.exists() and any(page_dir.glob(f"{GENERATION_PREFIX}*")):
        raise InputError(f"{page_dir} has generations but no readable index.json; publish into an empty directory")

    entries = _current_entries(page_dir, existing)
    added = _check_immutable(entries, new)  # every new file, before writing anything
    bar = Progress(len(new), "publishing") if progress and new else None
    for entry in new:
        entries[entry[0]] = entry
        if bar:
            bar.step(entry[0])

    texts = extra_files(entries)
    listing = sorted(
        [(name, sha) for name, sha, _, _ in entries.values()]
        + [(name, hashlib.sha256(t.encode()).hexdigest()) for name, t in texts.items()]
    )
    generation = GENERATION_PREFIX + hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]
    folder = generation + "/"
    pages = {
        "index.json": project_page_json(project, listing, folder),
        "index.html": _project_page_html(project, listing, folder),
    }
    target = page_dir / generation
    changed = current is None or current.name != generation
    if changed:
        page_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(page_dir, PUBLIC_DIR)
        if not target.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=page_dir, prefix=".new-"))
            try:
                os.chmod(tmp, PUBLIC_DIR)
                for name, sha, path, _ in entries.values():
                    os.link(_store_file(store, path, sha), tmp / name)
                for name, text in texts.items():
                    (tmp / name).write_text(text, encoding="utf-8")
                    os.chmod(tmp / name, PUBLIC_FILE)
                _fsync_dir(tmp)
                os.rename(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        for name in PAGES:  # each page in one rename: old or new, it links a complete generation
            atomic_write_text(page_dir / name, pages[name], PUBLIC_FILE)
        _fsync_dir(page_dir)
    _root_pages(simple, [p.name for p in simple.iterdir() if (p / "index.json").is_file() and p.name[0] != "."])
    _prune(page_dir, keep={generation} | ({current.name} if current is not None else set()))
    return Published(target, generation, tuple(n for n, _ in listing), tuple(added), changed)


def _live_generation(page_dir: Path) -> Path | None:
    """The generation the project page links (None for a new index)."""
    try:
        files = json.loads((page_dir / "index.json").read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    folders = {str(item["url"]).split("/")[0] for item in files if "/" in str(item.get("url", ""))}
    if len(folders) != 1:
        return None
    live = page_dir / folders.pop()
    return live if live.is_dir() else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(page_dir: Path, keep: set[str]) -> None:
    """Drop older generations and crashed runs' leftovers; keep the new and the previous one.

    A reader that read the previous page a moment ago still finds its files.
    """
    if not page_dir.is_dir():
        return
    for path in page_dir.iterdir():
        if path.is_dir() and path.name.startswith((GENERATION_PREFIX, ".new-")) and path.name not in keep:
            shutil.rmtree(path, ignore_errors=True)


def published_wheels(index_root: Path, catalog: Catalog) -> dict[str, str]:
    """Labelled file name -> label for every wheel the live index lists."""
    page = index_root / "simple" / normalize(catalog.name) / "index.json"
    if not page.is_file():
        return {}
    out = {}
    for item in json.loads(page.read_text(encoding="utf-8"))["files"]:
        name = item["filename"]
        if name.endswith(".whl"):
            label = parse_wheel_name(name).label
            if label:
                out[name] = label
    return out


# ------------------------------------------------------------------ local builds
def why_not_buildable(variant: Variant, catalog: Catalog, machine: str | None = None) -> str | None:
    """Why this machine cannot build ``variant`` (None when it can).

    The family must be this machine's (no cross compilers here), the toolchain
    complete (``build.missing_toolchain``), and for CUDA the nvcc on PATH of
    the variant's CUDA major.
    """
    import platform

    from selector_backend.install.build import missing_toolchain

    machine = machine or platform.machine()
    family = catalog.target_family[str(variant["target"])]
    if family != machine:
        return f"{family} target; this machine is {machine} (build it on an {family} runner)"
    missing = missing_toolchain(variant)
    if missing:
        return "missing " + "; ".join(missing)
    if _uses(variant, "mpi") and catalog.mpi_abi and mpicc_for(catalog.mpi_abi) is None:
        return f"needs an {catalog.mpi_abi} MPI (the prebuilt MPI ABI); see recipes/mpi/"
    return None


def check_built(wheel: Path, variant: Variant, catalog: Catalog) -> None:
    """The wheel must say (variant.json) it is exactly the variant that was asked for."""
    from selector_backend.engine.variant import format_variant
    from selector_backend.errors import ExternalError

    built = inspect_wheel(wheel, catalog).variant
    if built != variant:
        raise ExternalError(f"{wheel.name} was built as {format_variant(built)}, not {format_variant(variant)}")


def _run_into(
    cmd: list[str],
    outdir: Path,
    what: str,
    env: dict[str, str] | None = None,
    pattern: str = "*.whl",
    umask: int = -1,
) -> Path:
    """Run a command that writes one file (``pattern``) into a fresh directory; move it to ``outdir``, world-readable
    (a build frontend may write it 0600; published files are public)."""
    import subprocess

    from selector_backend.errors import ExternalError

    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=outdir, prefix=".work-") as work:
        result = subprocess.run([*cmd, str(work)], capture_output=True, text=True, env=env, umask=umask)
        if result.returncode != 0:
            lines = [ln for ln in (result.stdout + "\n" + result.stderr).splitlines() if ln.strip()]
            raise ExternalError(f"{what} failed (exit {result.returncode}): {' | '.join(lines[-3:])}")
        made = list(Path(work).glob(pattern))
        if len(made) != 1:
            raise ExternalError(f"{what} produced {len(made)} {pattern} files, expected one")
        final = outdir / made[0].name
        os.chmod(made[0], PUBLIC_FILE)
        os.replace(made[0], final)
    return final


def publishing_requirements(*, wheels: bool, isolated: bool, repair: bool, sdist: bool) -> list[str]:
    """What ``build-variants`` runs in this environment: the build frontend, the backend's build tools
    (unless ``--isolated`` lets the frontend install them), auditwheel to repair, the sdist's tools (the
    sdist is always built here). The ``[ci]`` extra carries all of them (tests/ci/test_publish.py)."""
    from selector_backend.install.build import BASE_BUILD_REQUIRES
    from selector_backend.install.sdist import SDIST_TOOLS

    needs = ["build>=1"] if wheels or sdist else []
    needs += list(BASE_BUILD_REQUIRES) if wheels and not isolated else []
    needs += ["auditwheel>=6"] if wheels and repair else []
    needs += list(SDIST_TOOLS) if sdist else []
    return list(dict.fromkeys(needs))


def check_requirements(needs: Sequence[str], what: str) -> None:
    """One line naming every requirement missing or too old here, and the pip command that installs them."""
    import importlib.metadata
    import shlex

    from packaging.requirements import Requirement

    missing = []
    for text in needs:
        requirement = Requirement(text)
        try:
            have = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            missing.append(text)
    if missing:
        raise InputError(
            f"{what} needs {', '.join(missing)} in this environment (missing or too old): "
            f"{shlex.quote(sys.executable)} -m pip install {' '.join(shlex.quote(m) for m in missing)}"
            " (or all of them: the [ci] extra)"
        )


COMPANIONS_DIR = "compat"  # the tree's own small distributions that the project's extras name


def companion_sources(source_dir: Path) -> list[Path]:
    """The source trees of the release's companion distributions: ``compat/*/pyproject.toml`` of the
    project tree (hvd-selector's: ``hvd-selector-horovod``, the ``[horovod]`` extra). A project
    adopting the backend has none, and its release carries only its provider beside its wheels."""
    return sorted(p.parent for p in (Path(source_dir) / COMPANIONS_DIR).glob("*/pyproject.toml"))


def companion_requirements(source_dir: Path) -> list[str]:
    """What building the companions here needs: the build frontend and each one's build requirements
    (built without isolation, like the variants: no download at release time)."""
    from selector_backend.files.tomlfile import load_toml

    needs = ["build>=1"] if companion_sources(source_dir) else []
    for tree in companion_sources(source_dir):
        needs += [str(r) for r in load_toml(tree / "pyproject.toml").data.get("build-system", {}).get("requires", [])]
    return list(dict.fromkeys(needs))


def build_companions(source_dir: Path, outdir: Path, catalog: Catalog, *, sdists: Sequence[Path] = ()) -> list[Path]:
    """Every distribution the release carries beside the variant wheels and the sdist: the namespace's
    variant provider (``provider_dist``), each ``companion_sources`` tree as a wheel, and, made from each of
    the release's ``sdists``, the NCCL companion sdist (``nccl_companion``). Without them an index serves
    ``hvd-selector`` but not ``hvd-selector[horovod]`` or ``[gpu-nvidia]`` (their extras pin the companions)."""
    from selector_backend.publishing.nccl_companion import nccl_companion_sdist
    from selector_backend.publishing.provider_dist import build_provider_wheel

    made = [build_provider_wheel(outdir / "provider", catalog)]
    made += [p for p in (nccl_companion_sdist(s, outdir / "nccl") for s in sdists) if p is not None]
    # The same bytes on every run (a re-run publish must find the published name unchanged): the wheel
    # builder dates every member SOURCE_DATE_EPOCH, 1980-01-01 (the zip epoch) unless the release sets it.
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "315532800")}
    for tree in companion_sources(source_dir):
        with tempfile.TemporaryDirectory(prefix="hvd-companion-") as work:
            copy = Path(work) / tree.name  # setuptools writes build/ and *.egg-info beside its sources
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            # The wheel records each file's mode: the build runs with umask 022 on sources of modes 0644/0755.
            for path in [copy, *copy.rglob("*")]:
                os.chmod(path, PUBLIC_DIR if path.is_dir() else PUBLIC_FILE)
            cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", str(copy), "--outdir"]
            what = f"building the {tree.name} companion ({tree})"
            made.append(_run_into(cmd, outdir / tree.name, what, env, umask=0o022))
    return made


def build_sdist(source_dir: Path, outdir: Path, index_url: str, env: dict[str, str] | None = None) -> Path:
    """The sdist with ``index_url`` embedded as its default index (``-C index-url``): what stock pip installs
    from a variant index, whose backend then fetches a labelled wheel from that same index. The one
    sdist builder: release pipeline, ``build-variants --index-url``, the end-to-end tests and benchmarks."""
    cmd = [sys.executable, "-m", "build", "--sdist", "--no-isolation", f"-Cindex-url={index_url}", str(source_dir)]
    what = f"building the sdist for {index_url}"
    return _run_into([*cmd, "--outdir"], outdir, what, backend_env(source_dir, env), pattern="*.tar.gz")


def backend_env(source_dir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The build frontend's environment: a project that does not carry this backend in its tree (another
    project adopting it) is built with this copy, found through PYTHONPATH by the hook process."""
    from selector_backend import PACKAGE_DIR

    env = dict(os.environ if env is None else env)
    if not (Path(source_dir) / "selector_backend").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_DIR.parent), env.get("PYTHONPATH")) if p)
    return env


def _uses(variant: Variant, library: str) -> bool:
    from selector_backend.engine.catalog import load_catalog

    return library in load_catalog().libraries_of(variant)


def mpicc_for(abi: str) -> str | None:
    """An mpicc of the ABI family (Debian's mpicc.mpich, or an mpicc that is MPICH/Open MPI)."""
    import shutil
    import subprocess

    suffixed = shutil.which(f"mpicc.{abi}")
    if suffixed:
        return suffixed
    plain = shutil.which("mpicc")
    if plain:
        show = subprocess.run([plain, "-show"], capture_output=True, text=True).stdout
        info = subprocess.run([plain, "--showme:libs"], capture_output=True, text=True).stdout
        if (abi == "mpich" and "-lmpi" in show and not info) or (abi == "openmpi" and info):
            return plain
    return None


def build_one(variant: Variant, outdir: Path, *, source_dir: Path, catalog: Catalog, isolated: bool = False) -> Path:
    """Build one variant's wheel with the project's PEP 517 backend (``-C variant=...``).

    An MPI variant is linked against the catalog's prebuilt MPI ABI ([builds]
    mpi_abi), whatever ``mpicc`` is on PATH, through scikit-build-core's
    SKBUILD_CMAKE_DEFINE.
    """
    from selector_backend.engine.variant import format_variant

    cmd = [sys.executable, "-m", "build", "--wheel", f"-Cvariant={format_variant(variant)}", str(source_dir)]
    if not isolated:
        cmd.insert(4, "--no-isolation")
    env = backend_env(source_dir)
    if _uses(variant, "mpi") and catalog.mpi_abi:
        mpicc = mpicc_for(catalog.mpi_abi)
        if mpicc:
            env["SKBUILD_CMAKE_DEFINE"] = f"MPI_C_COMPILER={mpicc}"
    return _run_into([*cmd, "--outdir"], outdir, f"building {format_variant(variant)}", env)


def repair(wheel: Path, outdir: Path, excludes: Sequence[str], isa_check: bool) -> Path:
    """``auditwheel repair`` with the matrix's exclusions and ISA decision."""
    cmd = [sys.executable, "-m", "auditwheel", "repair", str(wheel)]
    cmd += [arg for name in excludes for arg in ("--exclude", name)]
    if not isa_check:
        cmd.append("--disable-isa-ext-check")
    return _run_into([*cmd, "-w"], outdir, f"auditwheel repair {wheel.name}")


def generation_dir(index_root: Path, catalog: Catalog) -> Path | None:
    """The directory of the files the live project page lists (None before the first publish)."""
    return _live_generation(index_root / "simple" / normalize(catalog.name))
