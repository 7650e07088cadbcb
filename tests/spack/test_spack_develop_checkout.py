"""A checkout that `spack develop` built: what Spack leaves in it stays out of the sdist.

Spack links each development build's stage into the source folder as
``build-<platform>-<os>-<target>-<hash7>`` (its ``develop_stage_link`` default);
the stage holds ``spack-build-env.txt``, the build's whole environment. The test
builds a real sdist (``python -m build``, scikit-build-core, which honours
``.gitignore``) from a copy of this checkout carrying such a link.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The link Spack 1.1 made for `spack develop` of py-hvd-selector on a Debian 12 x86_64_v4 host.
STAGE_LINK = "build-linux-debian12-x86_64_v4-yvws3w3"


def _copy_checkout(dest: Path) -> None:
    """The files git would hand out (tracked and not-ignored new ones), as in the work tree."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listing.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def test_sdist_of_a_spack_develop_checkout_leaves_out_spacks_stage(tmp_path: Path) -> None:
    pytest.importorskip("build")
    pytest.importorskip("scikit_build_core")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    checkout = tmp_path / "checkout"
    _copy_checkout(checkout)
    stage = tmp_path / "spack-stage" / "spack-stage-py-hvd-selector-0.1.0-yvws3w3"
    stage.mkdir(parents=True)
    (stage / "spack-build-env.txt").write_text("export SOME_TOKEN=do-not-ship\n")
    (checkout / STAGE_LINK).symlink_to(stage, target_is_directory=True)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out), str(checkout)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    top = names[0].split("/")[0]
    assert f"{top}/pyproject.toml" in names and f"{top}/native/src/tcp_auth.cpp" in names
    assert not [n for n in names if STAGE_LINK in n or "spack-build" in n]
