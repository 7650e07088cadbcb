"""Fresh virtual environments and the local wheels they install from: what the
pip end-to-end tests and the pip-install benchmark both set up."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterable
from pathlib import Path

from devtools.build_cache import BUILD_DIR, build_once, files_hash

TEMPLATES_DIR = BUILD_DIR / "venv-templates"


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user with no hvd-selector or pip settings and no active venv sees it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "PIP_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@functools.cache
def _template(packages: tuple[str, ...] = (), find_links: str | None = None) -> Path:
    """The venv every ``make_venv`` for these ``packages`` copies: made once per interpreter, package
    set and wheelhouse content under build/venv-templates/ (devtools.build_cache), so the pytest-xdist
    workers of a run, and the runs after it, share it. Pip comes from ensurepip (about 6 s of CPU a
    venv, a copy a tenth of that); ``packages`` are then installed once from the ``find_links``
    wheelhouse (numpy's wheel alone costs a fresh venv more CPU than copying the installed files)."""
    wheels = sorted(Path(find_links).glob("*.whl")) if find_links else []
    key = files_hash(wheels, sys.executable, sys.version, *packages, root=Path(find_links or "/"))
    return build_once(TEMPLATES_DIR / key, lambda root: _make_template(root, packages, find_links))


def _make_template(root: Path, packages: tuple[str, ...], find_links: str | None) -> None:
    venv.EnvBuilder(with_pip=True).create(root)
    if packages:
        cmd = [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        cmd += ["--no-index", "--find-links", str(find_links), *packages]
        _run_pip(cmd, env=user_env())


def _run_pip(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> None:
    """Run a pip command; a failure raises with pip's own last words."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stderr[-4000:]}")


def site_packages(root: Path) -> Path:
    """The site-packages folder of the venv at ``root``."""
    return next((root / "lib").glob("python*/site-packages"))


def _link_or_copy(source: str, target: str) -> None:
    """A hard link to the template's file, or a copy where links cannot go (another filesystem).
    Linking writes no data (a 100 MB template: 0.08-0.14 CPU-s, against 0.67-1.46 to copy), and the template
    stays as it was: pip and uv unlink a file before they write it again, and Python replaces a
    ``.pyc`` by renaming a new file over it."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def make_venv(
    path: Path,
    system_site_packages: bool = False,
    packages: Iterable[str] = (),
    find_links: Path | None = None,
) -> Path:
    """A fresh venv with pip (and ``packages``, from the ``find_links`` wheelhouse) at ``path``
    (an old one there is removed); returns its bin/.

    The venv is made by ``venv`` without pip, then gets the files that ensurepip and pip
    installed into the template venv for the same ``packages``: the same files (hard links),
    and the scripts with this venv's interpreter in their first line, as pip would have
    written them here."""
    venv.EnvBuilder(system_site_packages=system_site_packages, clear=True).create(path)
    template = _template(tuple(sorted(packages)), str(find_links) if packages else None)
    shutil.copytree(
        site_packages(template), site_packages(path), symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True
    )
    for script in (template / "bin").iterdir():
        target = path / "bin" / script.name
        if target.exists() or script.is_symlink() or not script.read_bytes().startswith(b"#!"):
            continue  # python*, activate* are venv's own
        shebang, body = script.read_text(encoding="utf-8").split("\n", 1)
        target.write_text(f"{shebang.replace(str(template), str(path))}\n{body}", encoding="utf-8")
        target.chmod(0o755)
    return path / "bin"


def download_wheels(dest: Path, packages: Iterable[str], timeout: float = 600) -> Path:
    """Binary wheels of ``packages`` and their dependencies into ``dest``, so later
    installs need no network (``pip install --find-links dest``). This one runs
    with the caller's pip settings: they say how to reach the index."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest), *packages]
    _run_pip(cmd, timeout=timeout)
    return dest


def shared_wheelhouse(run_dir: Path, packages: Iterable[str]) -> Path:
    """``download_wheels`` of ``packages`` at most once for everything that shares ``run_dir`` (the
    pytest-xdist workers of one run: tests/conftest.py's ``run_tmp_path``), under a file lock."""
    names = sorted(set(packages))
    return build_once(run_dir / f"wheelhouse-{files_hash([], *names)}", lambda dest: download_wheels(dest, names))
