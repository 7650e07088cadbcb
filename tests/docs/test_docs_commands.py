"""Every docs block marked runnable runs against the local variant index and shows what it says.

The index is the one the README's main job builds (``ci/quickstart.py``'s
``build_local_index``), built once per session under a temporary
``build/quickstart`` so the docs' ``$PWD/build/quickstart/index/simple``
works as written; blocks marked ``docs-venv`` run in one fresh virtual
environment per session (stock pip, dependencies from PyPI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import quickstart
from devtools.venvs import make_venv

from .runnable import Block, find_blocks, pattern, script, split_output

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCKS = find_blocks(DOCS)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def docs_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding build/quickstart/index, built once per session."""
    work = tmp_path_factory.mktemp("docs-work")
    # one baseline CPU build keeps the session short; it runs on every x86_64/aarch64 host
    import platform

    target = "aarch64" if platform.machine() == "aarch64" else "x86_64"
    quickstart.build_local_index(work / "build" / "quickstart", [f"target={target} tensor_ops=gloo controllers=gloo"])
    (work / "examples").symlink_to(ROOT / "examples")  # the docs' examples/host profiles, as in a checkout
    return work


@pytest.fixture(scope="session")
def docs_venv(docs_work: Path) -> Path:
    env_dir = docs_work / "venv"
    make_venv(env_dir)
    return env_dir


def block_env(block: Block, docs_venv: Path, docs_work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVD_SELECTOR", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if block.mode in ("docs-venv", "2 ranks"):
        env["VIRTUAL_ENV"] = str(docs_venv)
        env["PATH"] = f"{docs_venv / 'bin'}{os.pathsep}{env['PATH']}"
    else:
        env["PYTHONPATH"] = str(ROOT)  # `python -m selector_backend` from the checkout
        env["PATH"] = f"{checkout_command(docs_work)}{os.pathsep}{env['PATH']}"
    for name, value in block.env.items():
        env[name] = str(ROOT / value) if value.startswith(("tests/", "examples/")) else value
    return env


def checkout_command(docs_work: Path) -> Path:
    """A bin/ whose ``hvd-selector`` is the checkout's ``python -m selector_backend``."""
    bindir = docs_work / "checkout-bin"
    if not bindir.is_dir():
        bindir.mkdir()
        shim = bindir / "hvd-selector"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m selector_backend "$@"\n')
        shim.chmod(0o755)
    return bindir


def test_the_docs_mark_runnable_blocks() -> None:
    pages = {b.page for b in BLOCKS}
    assert {"guide/distribution.md", "guide/docker.md", "guide/collectives.md"} <= pages, pages


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_runnable_block(block: Block, docs_work: Path, docs_venv: Path) -> None:
    env = block_env(block, docs_venv, docs_work)
    if block.lang == "python":
        source = docs_work / f"block-{block.line}.py"
        source.write_text(block.text + "\n")
        run = [
            str(docs_venv / "bin" / "hvd-selector"),
            "run",
            "-np",
            "2",
            str(docs_venv / "bin" / "python"),
            str(source),
        ]
        proc = subprocess.run(run, capture_output=True, text=True, env=env, cwd=docs_work, timeout=300)
        assert proc.returncode == 0, f"{block.id}: {proc.stdout}\n{proc.stderr}"
        return
    steps = block.steps()
    assert steps, f"{block.id}: no $ commands"
    proc = subprocess.run(
        ["bash", "-c", script(steps)], capture_output=True, text=True, env=env, cwd=docs_work, timeout=600
    )
    for step, (output, rc) in zip(steps, split_output(proc.stdout, len(steps)), strict=True):
        shows_error = any("error:" in line for line in step.expected)
        assert (rc != 0) == shows_error, f"{block.id}: `{step.command}` exited {rc}:\n{output}"
        assert pattern(step.expected).fullmatch(output), (
            f"{block.id}: `{step.command}` printed\n{output}\nwhich does not match the docs:\n"
            + "\n".join(step.expected)
        )
