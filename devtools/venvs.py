"""Fresh virtual environments and the local wheels they install from: what the
pip end-to-end tests and the pip-install benchmark both set up."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterable
from pathlib import Path


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user with no hvd-selector or pip settings and no active venv sees it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "PIP_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@functools.cache
def _pip_template() -> Path:
    """One venv per process with pip installed by ensurepip, removed at exit: the pip every
    ``make_venv`` copies (ensurepip takes about 6 s of CPU a venv, a copy a tenth of that)."""
    root = Path(tempfile.mkdtemp(prefix="hvd-selector-pip-venv-"))
    atexit.register(shutil.rmtree, root, True)
    venv.EnvBuilder(with_pip=True).create(root)
    return root


def _site_packages(root: Path) -> Path:
    return next((root / "lib").glob("python*/site-packages"))


def make_venv(path: Path, system_site_packages: bool = False) -> Path:
    """A fresh venv with pip at ``path`` (an old one there is removed); returns its bin/.

    The venv is made by ``venv`` without pip, then gets the pip that ensurepip installed
    into this process's template venv: the same files, and pip's scripts with this venv's
    interpreter in their first line, as ensurepip would have written them here."""
    venv.EnvBuilder(system_site_packages=system_site_packages, clear=True).create(path)
    template = _pip_template()
    shutil.copytree(_site_packages(template), _site_packages(path), symlinks=True, dirs_exist_ok=True)
    for script in (template / "bin").glob("pip*"):
        shebang, body = script.read_text(encoding="utf-8").split("\n", 1)
        target = path / "bin" / script.name
        target.write_text(f"{shebang.replace(str(template), str(path))}\n{body}", encoding="utf-8")
        target.chmod(0o755)
    return path / "bin"


def download_wheels(dest: Path, packages: Iterable[str], timeout: float = 600) -> Path:
    """Binary wheels of ``packages`` and their dependencies into ``dest``, so later
    installs need no network (``pip install --find-links dest``). This one runs
    with the caller's pip settings: they say how to reach the index."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest), *packages]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stderr[-4000:]}")
    return dest
