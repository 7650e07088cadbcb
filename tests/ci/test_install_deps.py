"""The README's two commands: the main job installs what building and running need, the test command the rest."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".ci"


def listed(name: str) -> set[str]:
    lines = (CI / name).read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


def test_the_readme_names_both_commands_and_the_main_job_installs_the_build_lists_only() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash ci/quickstart.sh" in readme and "bash .ci/install-deps && python -m pytest" in readme
    assert re.search(r"(?m)^bash \.ci/install-deps --build-only$", (ROOT / "ci/quickstart.sh").read_text())
    assert not listed("apt-packages-build.txt") & listed("apt-packages.txt")
    assert not listed("requirements-build.txt") & listed("requirements.txt")


def test_the_tools_only_tests_use_stay_out_of_the_main_job() -> None:
    """Each tool a test skips without names the test list it is in, and it is not in a build list."""
    skipped = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for match in re.finditer(r"\(([\w\-, ]+) in \.ci/apt-packages\.txt\)", path.read_text(encoding="utf-8")):
            skipped |= {name.strip() for name in match.group(1).split(",")}
    assert {"slurm-wlm", "munge", "openssh-server"} <= skipped, skipped
    assert skipped <= listed("apt-packages.txt"), skipped - listed("apt-packages.txt")
    for tool in ("chromium", "slurm-wlm", "munge", "qemu-user", "openssh-server", "mpich"):
        assert tool not in listed("apt-packages-build.txt")
    for tool in ("pytest", "torch==2.13.0", "hypothesis", "sphinx", "uv"):
        assert tool not in listed("requirements-build.txt")


def test_install_deps_passes_shellcheck_and_refuses_an_unknown_option() -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck not installed (.ci/apt-packages.txt lists it)")
    check = subprocess.run([exe, "-S", "warning", str(CI / "install-deps")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    bad = subprocess.run(["bash", str(CI / "install-deps"), "--tests"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage: bash .ci/install-deps [--build-only]" in bad.stderr


@pytest.mark.parametrize("failing", ["apt-get", "pip"])
def test_a_failed_apt_get_or_pip_is_one_line_with_its_code_after_both_have_ended(tmp_path: Path, failing: str) -> None:
    """apt-get and pip run at once; whichever fails is named with its exit code, and the script
    leaves nothing behind (its temporary files). apt-get is a stand-in on PATH: the real one would
    need the network and root; pip is the real one, refusing a project folder that does not exist."""
    ci = tmp_path / ".ci"
    ci.mkdir()
    shutil.copy(CI / "install-deps", ci / "install-deps")
    (ci / "apt-packages-build.txt").write_text("hvd-selector-no-such-package\n")
    (ci / "requirements-build.txt").write_text("./no-such-project\n" if failing == "pip" else "pip\n")
    bin_dir, scratch = tmp_path / "bin", tmp_path / "scratch"
    bin_dir.mkdir()
    scratch.mkdir()
    code = 100 if failing == "apt-get" else 0
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\nsleep 0.2\nexit {code}\n")
    (bin_dir / "apt-get").chmod(0o755)
    if os.getuid() != 0:
        (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
        (bin_dir / "sudo").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(scratch)}
    proc = subprocess.run(
        ["bash", str(ci / "install-deps"), "--build-only"], capture_output=True, text=True, timeout=120, env=env
    )
    last = proc.stderr.strip().splitlines()[-1]
    if failing == "apt-get":
        assert proc.returncode == 100, proc.stderr
        assert last == "install-deps: apt-get failed (exit 100) installing: hvd-selector-no-such-package"
    else:
        assert proc.returncode == 1, proc.stderr
        assert last == "install-deps: pip install failed (exit 1): its output is above"
        assert "no-such-project" in proc.stderr  # pip's own reason, printed before that line
    assert list(scratch.iterdir()) == []
