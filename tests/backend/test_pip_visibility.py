"""What a user sees from a plain ``pip wheel``/``pip install`` (no ``-v``), against a real pip.

pip captures a build backend's stderr and prints it only with ``-v`` or when
the hook fails. The backend's choice and fallbacks must still be visible, so
while a hook runs they also go to the controlling terminal (``console``).
These tests run stock pip on a pseudo-terminal, as a user's shell would, and
read what the terminal shows; and with no terminal at all (a new session with
pipes, as CI and ``docker build`` run it). A host with NVIDIA GPUs that no GPU
build fits stops the install on both, with the same line (docs/guide/install.md).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .backend_helpers import REPO, clean_env
from .hostile_index import PROJECT, HostileIndex, drip, hostile_index, make_wheel


def on_terminal(argv: list[str], env: dict[str, str], limit: float = 120) -> tuple[int, str, float]:
    """Run ``argv`` with a pseudo-terminal as its controlling terminal; (exit code, what it showed, seconds)."""
    start = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: pty.fork made the terminal its controlling one
        os.chdir(REPO)
        os.execve(argv[0], argv, env)
    chunks: list[bytes] = []
    while time.monotonic() - start < limit:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace"), time.monotonic() - start


def unwrapped(text: str) -> str:
    """What a tool showed with its line wrapping undone: uv wraps a backend's stderr to the terminal's width
    (80 columns where it has none), so a message is checked word by word, not line by line."""
    return " ".join(text.split())


@pytest.fixture()
def index() -> Iterator[HostileIndex]:
    with hostile_index() as server:
        yield server


def pip_wheel(index: HostileIndex, out: Path, cache: Path, *settings: str) -> list[str]:
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-w", str(out)]
    for item in (
        f"index-url={index.index_url}",
        f"cache-dir={cache}",
        "index-timeout=2",
        "index-retries=1",
        *settings,
    ):
        argv += ["-C", item]
    return [*argv, str(REPO)]


def test_the_choice_is_shown_without_verbose(index: HostileIndex, tmp_path: Path) -> None:
    index.publish(make_wheel())
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb")
    rc, shown, _ = on_terminal(pip_wheel(index, tmp_path / "out", tmp_path / "cache"), env)
    assert rc == 0, shown
    assert "hvd-selector: selected prebuilt target=x86_64" in shown, shown
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["hvd_selector-0.1.0-py3-none-linux_x86_64.whl"]
    quiet = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb", HVD_SELECTOR_QUIET="1")
    rc, shown, _ = on_terminal(pip_wheel(index, tmp_path / "out2", tmp_path / "cache"), quiet)
    assert rc == 0 and "selected prebuilt" not in shown, shown


def test_a_hostile_index_ends_pip_with_one_clear_line(index: HostileIndex, tmp_path: Path) -> None:
    """A page dripping one byte a second: pip fails within the deadline, our line says why, nothing built."""
    index.publish(make_wheel())
    page = index.routes[f"/simple/{PROJECT}/"]
    assert isinstance(page, bytes)
    index.routes[f"/simple/{PROJECT}/"] = drip(page)
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "cfg"), TERM="dumb")
    cache = tmp_path / "cache"
    argv = pip_wheel(index, tmp_path / "out", cache, "build-policy=never-build")
    rc, shown, seconds = on_terminal(argv, env)
    assert rc != 0, shown
    assert "Traceback" not in shown, shown
    errors = [line for line in shown.splitlines() if "hvd-selector: error:" in line]
    assert errors and "no complete answer within 2 s" in errors[-1], shown
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    local = ("catalog-memos",)  # the checkout's catalog, parsed: nothing from the index
    assert not [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock" and p.parent.name not in local]
    assert seconds < 40, f"{seconds:.1f} s\n{shown}"  # pip start-up + 2 hooks x (2 attempts x 2 s + back-off)


GTX1080 = REPO / "tests" / "data" / "nvml" / "gtx1080.json"  # recorded NVML answers: Pascal 6.1, driver CUDA 12.2


def pip_install(index: HostileIndex, target: Path, cache: Path, *settings: str) -> list[str]:
    """``pip install`` (no -v) of the checkout into ``target``, with the backend's settings."""
    argv = pip_wheel(index, target, cache, *settings)
    argv[argv.index("wheel") : argv.index("-w") + 2] = ["install", "--no-deps", "--no-build-isolation", "--target"]
    argv.insert(argv.index("--target") + 1, str(target))
    argv.insert(argv.index("--no-build-isolation") + 1, "--no-cache-dir")
    return argv


def no_terminal(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as CI or ``docker build`` does: a new session (no controlling terminal), pipes only."""
    return subprocess.run(
        argv,
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=300,
    )


@pytest.fixture()
def gtx1080_without_cuda12(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A GTX 1080 host (recorded NVML answers) where the GPU source build cannot be made (no CUDA 12 nvcc)."""
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.install.build import missing_toolchain

    catalog = load_catalog()
    gpu_build = catalog.parse_variant("target=x86_64 cuda=12 cuda_arch=61 tensor_ops=nccl", fill_defaults=True)
    if not missing_toolchain(gpu_build):
        pytest.skip("this machine can build the CUDA 12 source build, which auto then installs")
    return clean_env(TERM="dumb", HVD_SELECTOR_NVML_REPLAY=str(GTX1080))


def test_a_gpu_host_getting_the_cpu_build_is_told_in_pip_output_without_a_terminal(
    index: HostileIndex, tmp_path: Path, gtx1080_without_cuda12: dict[str, str]
) -> None:
    """No -v, no terminal (a new session, pipes only): pip shows nothing of a successful build, so the
    install stops with the warning, which pip then prints; the CPU build needs saying so."""
    index.publish(make_wheel())
    env = {**gtx1080_without_cuda12, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    argv = pip_install(index, tmp_path / "site", tmp_path / "cache")
    proc = no_terminal(argv, env)
    shown = proc.stdout + proc.stderr
    assert proc.returncode != 0, shown
    assert "WARNING: this host has 1 NVIDIA GPU(s) [1x NVIDIA GeForce GTX 1080 (6.1), driver CUDA 12.2]" in shown
    assert "A GPU source build would fit: cuda=12 cuda_arch=61" in shown and "-C selector=cpu" in shown, shown
    assert "WARNING: installing the CPU build" not in shown and "Traceback" not in shown, shown
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())
    proc = no_terminal([*argv[:-1], "-C", "selector=cpu", argv[-1]], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "hvd_selector_stub").is_dir() and "NVIDIA GPU" not in proc.stdout + proc.stderr


def test_a_terminal_changes_nothing_on_a_gpu_host_no_gpu_build_fits(
    index: HostileIndex, tmp_path: Path, gtx1080_without_cuda12: dict[str, str]
) -> None:
    """The one rule (docs/guide/install.md): on a terminal too the install stops with exit 3 and the line
    naming the ways out, where it used to install the CPU build with a warning; the CPU build needs asking."""
    index.publish(make_wheel())
    env = {**gtx1080_without_cuda12, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    argv = pip_install(index, tmp_path / "site", tmp_path / "cache")
    rc, shown, _ = on_terminal(argv, env)
    assert rc != 0, shown
    assert "WARNING: this host has 1 NVIDIA GPU(s) [1x NVIDIA GeForce GTX 1080 (6.1)" in shown, shown
    assert "not installing a CPU build on a host with NVIDIA GPUs unasked" in shown, shown
    assert "-C selector=cpu" in shown and "HVD_SELECTOR=cpu" in shown and "Traceback" not in shown, shown
    assert "WARNING: installing the CPU build" not in shown and "selected prebuilt" not in shown, shown
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())
    rc, shown, _ = on_terminal(argv, {**env, "HVD_SELECTOR": "cpu"})
    assert rc == 0 and "selected prebuilt target=x86_64" in shown and "NVIDIA GPU" not in shown, shown
    assert (tmp_path / "site" / "hvd_selector_stub").is_dir()


def test_uv_shows_the_same_stop_with_or_without_a_terminal(
    index: HostileIndex, tmp_path: Path, gtx1080_without_cuda12: dict[str, str]
) -> None:
    """uv, like pip, shows a build backend's output only when the build fails (or with -v); a terminal
    changes nothing."""
    import shutil

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    index.publish(make_wheel())
    env = {**gtx1080_without_cuda12, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "UV_NO_CACHE": "1"}
    argv = [uv, "pip", "install", "--python", sys.executable, "--target", str(tmp_path / "site"), "--no-deps"]
    argv += ["--no-build-isolation", "-C", f"index-url={index.index_url}", "-C", f"cache-dir={tmp_path / 'cache'}"]
    proc = no_terminal([*argv, str(REPO)], env)
    shown = unwrapped(proc.stdout + proc.stderr)
    assert proc.returncode != 0, shown
    assert "WARNING: this host has 1 NVIDIA GPU(s) [1x NVIDIA GeForce GTX 1080 (6.1)" in shown, shown
    assert "-C selector=cpu" in shown, shown
    rc, shown, _ = on_terminal([*argv, str(REPO)], env)  # and on a terminal, the same stop
    shown = unwrapped(shown)
    assert rc != 0 and "not installing a CPU build on a host with NVIDIA GPUs unasked" in shown, shown
    assert not [p for p in (tmp_path / "site").glob("*") if p.name != ".lock"]  # uv's lock file, nothing installed
