"""What the pip end-to-end tests share: running commands, the variant index they
install from (built and published through the project's own tools), and stock
pip in fresh venvs. The fixtures that build it once per session are in conftest.py."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devtools.build_cache import BUILD_DIR, build_once, files_hash, source_files
from devtools.loopback_http import FlakyServer
from devtools.venvs import download_wheels, make_venv, user_env

REPO = Path(__file__).resolve().parents[2]
E2E_TARGETS = ("x86_64", "x86_64_v3", "x86_64_v4")
# What goes into a wheel of hvd-selector: a change to any of these files builds the wheels again.
WHEEL_SOURCES = (
    "pyproject.toml",
    "CMakeLists.txt",
    "README.md",
    "LICENSE",
    "native",
    "hvd_selector",
    "selector_backend",
    "variants",
)
RUNTIME_DEPS = ("numpy", "archspec", "packaging", "nvidia-ml-py")
BUILD_DEPS = ("packaging", "archspec", "scikit-build-core", "nanobind", "cmake", "ninja", "pathspec")


def run(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 900,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command; commands from a venv run inside it, so the checkout is never on sys.path."""
    if cwd is None and (Path(cmd[0]).parent.parent / "pyvenv.cfg").is_file():
        cwd = Path(cmd[0]).parent.parent
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
            f"--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user with no hvd-selector configuration."""
    return user_env(PYTHONDONTWRITEBYTECODE="1", **extra)


@dataclass
class VariantIndex:
    root: Path
    server: FlakyServer
    wheels: dict[str, Path]
    sdist: Path
    wheelhouse: Path

    @property
    def url(self) -> str:
        return f"{self.server.url}/simple"

    def published_path(self, target: str) -> str:
        """URL path (on the server) of the labelled wheel published for ``target``."""
        from selector_backend.engine.catalog import load_catalog
        from selector_backend.publishing.publish import generation_dir, inspect_wheel

        name = inspect_wheel(self.wheels[target], load_catalog()).published_name
        folder = generation_dir(self.root, load_catalog())
        assert folder is not None and (folder / name).is_file(), f"{name} is not published"
        return f"/{folder.relative_to(self.root).as_posix()}/{name}"


def nccl_wheelhouse() -> Path:
    """A folder holding the real nvidia-nccl-cu13 wheel of the version installed here (.ci/requirements.txt),
    downloaded once per machine into build/test-wheels/ (about 300 MB; pip's cache serves later downloads)."""
    version = importlib.metadata.version("nvidia-nccl-cu13")
    return build_once(
        BUILD_DIR / "test-wheels" / f"nvidia-nccl-cu13-{version}",
        lambda folder: download_wheels(folder, [f"nvidia-nccl-cu13=={version}"]),
    )


def built_wheels(targets: tuple[str, ...]) -> dict[str, Path]:
    """The auditwheel-repaired gloo wheels ``hvd-selector build-variants`` builds for ``targets``,
    built at most once per state of the wheel's sources (build/test-wheels/, devtools.build_cache):
    the sessions and pytest-xdist workers after the first reuse them."""
    key = files_hash(source_files(*WHEEL_SOURCES), sys.version, *targets)
    folder = build_once(BUILD_DIR / "test-wheels" / f"gloo-{key}", lambda folder: _build_variants(folder, targets))
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.publishing.publish import inspect_wheel

    catalog = load_catalog()
    wheels = {}
    for path in (folder / "wheelhouse").glob("*/*.whl"):
        if path.parent.name != "raw":
            wheels[str(inspect_wheel(path, catalog).variant["target"])] = path
    assert set(targets) <= set(wheels), f"build-variants left {sorted(wheels)} for {targets}"
    return wheels


def _build_variants(folder: Path, targets: tuple[str, ...]) -> None:
    """``hvd-selector build-variants`` (the release builder: backend + auditwheel) into ``folder``."""
    cmd = [sys.executable, "-m", "selector_backend", "build-variants", "--index", str(folder / "index")]
    cmd += ["--wheelhouse", str(folder / "wheelhouse")]
    for target in targets:
        cmd += ["--variant", f"target={target} tensor_ops=gloo controllers=gloo"]
    run(cmd, env=clean_env(), cwd=REPO, timeout=1800)


def publish_index(dest: Path, wheels: list[Path], sdist: Path) -> Path:
    """A variant index at ``dest`` holding ``wheels``, the sdist and the release's companions
    (``hvd-selector-horovod``, the variant provider), published as releases are."""
    import tempfile

    from selector_backend.engine.catalog import load_catalog
    from selector_backend.publishing.publish import build_companions, publish, publish_companions

    catalog = load_catalog()
    publish(wheels, dest, catalog, sdists=[sdist], progress=False)
    with tempfile.TemporaryDirectory(prefix="hvd-companions-") as work:
        companions = build_companions(REPO, Path(work), catalog, sdists=[sdist])
        publish_companions(companions, dest, catalog, progress=False)
    return dest


def pip_install(
    bindir: Path, index: VariantIndex, *extra: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Stock pip: the sdist comes from the variant index, dependencies from the local wheelhouse."""
    return run(
        [
            str(bindir / "python"),
            "-m",
            "pip",
            "install",
            "-v",
            "--no-cache-dir",
            "--find-links",
            str(index.wheelhouse),
            "--extra-index-url",
            index.url,
            *extra,
            "hvd-selector",
        ],
        env=env or clean_env(),
        check=check,
        timeout=1200,
    )


def venv_with_dependencies(path: Path, index: VariantIndex) -> Path:
    """A fresh venv (bin/) that already holds hvd-selector's runtime dependencies, hard-linked from
    one template (devtools.venvs): pip still resolves them, and installs hvd-selector alone.
    For tests about what is installed, not how numpy is; test_host_profile_override keeps one
    install with every dependency into a bare venv."""
    return make_venv(path, packages=RUNTIME_DEPS, find_links=index.wheelhouse)


def build_info(bindir: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    out = run(
        [str(bindir / "python"), "-c", "import json, hvd_selector; print(json.dumps(hvd_selector.build_info()))"],
        env=env or clean_env(),
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def copy_index(index: VariantIndex, dest: Path, keep: tuple[str, ...]) -> Path:
    """A second index holding only the wheels for ``keep`` targets (plus the same sdist)."""
    if dest.exists():
        shutil.rmtree(dest)
    return publish_index(dest, [index.wheels[t] for t in keep], index.sdist)
