"""Each exit code of docs/reference/exit-codes.md, triggered for real and compared with the table."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from selector_backend.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "reference" / "exit-codes.md"
A100_12_2 = {
    "platform": "linux",
    "machine": "x86_64",
    "cpu": {"microarch": "zen3"},
    "gpus": [{"vendor": "nvidia", "compute_capability": "8.0"}],
    "cuda_driver": "12.2",
}


def documented_codes() -> set[int]:
    return {int(m) for m in re.findall(r"^\| (\d+) \|", TABLE.read_text(), flags=re.M)}


def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    (tmp_path / "config.toml").write_text("")
    clean.update(PYTHONPATH=str(ROOT), HVD_SELECTOR_CONFIG=str(tmp_path / "config.toml"))
    clean["HVD_SELECTOR_CACHE_DIR"] = str(tmp_path / "cache")
    return clean


def hvd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "selector_backend", *args],
        capture_output=True,
        text=True,
        env=env(tmp_path),
        cwd=ROOT,
        timeout=120,
    )


def threads_of(pid: int) -> list[str]:
    """Each thread's kernel wait and signal masks, for a process that did not end on a signal."""
    found = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
        fields = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
        found.append(
            f"{task.name} {(task / 'wchan').read_text()} " + " ".join(f"{k}={status[k].strip()}" for k in fields)
        )
    return found


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture()
def silent_server() -> Iterator[socket.socket]:
    """A loopback server that never answers (so a command waits until interrupted)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def trigger_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent: socket.socket) -> dict[int, list[str]]:
    seen: dict[int, list[str]] = {}

    def record(code: int, what: str, proc: subprocess.CompletedProcess[str], error_line: bool = True) -> None:
        assert proc.returncode == code, f"{what}: exit {proc.returncode}, table says {code}\n{proc.stderr}"
        if code not in (0, 130) and error_line:
            one_error_line(proc)
        seen.setdefault(code, []).append(what)

    profile = tmp_path / "a100.json"
    profile.write_text(json.dumps(A100_12_2))
    no_cpu = tmp_path / "no-cpu.json"
    no_cpu.write_text(json.dumps({"gpus": []}))
    record(0, "resolve", hvd(tmp_path, "resolve"))
    record(
        0,
        "matrix --check (current)",
        hvd(tmp_path, "matrix", "--format", "github", "--check", ".github/workflows/wheels.yml"),
    )
    record(2, "unknown selector", hvd(tmp_path, "resolve", "--selector", "gpu-nvidai"))
    record(2, "horovod-env, profile without cpu", hvd(tmp_path, "horovod-env", "--host-profile", str(no_cpu)))
    record(
        3, "resolve --require-prebuilt", hvd(tmp_path, "resolve", "--host-profile", str(no_cpu), "--require-prebuilt")
    )
    record(
        3,
        "resolve --selector gpu-nvidia, no GPU",
        subprocess.run(
            [sys.executable, "-m", "selector_backend", "resolve", "--selector", "gpu-nvidia"],
            capture_output=True,
            text=True,
            env={**env(tmp_path), "HVD_SELECTOR_GPUS": "none"},
            cwd=ROOT,
        ),
    )
    stale = tmp_path / "wheels.yml"
    stale.write_text((ROOT / ".github/workflows/wheels.yml").read_text() + "# edited\n")
    record(3, "stale matrix --check", hvd(tmp_path, "matrix", "--format", "github", "--check", str(stale)))
    variant = tmp_path / "variant.json"
    from selector_backend.engine import variant_json
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    variant.write_text(variant_json.dumps(catalog.parse_variant("target=neoverse_v1", fill_defaults=True), catalog))
    doctor = hvd(tmp_path, "doctor", "--variant-json", str(variant))
    record(3, "doctor mismatch", doctor, error_line=False)  # a report on stdout, not an error
    fix = f"fix: {sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir hvd-selector"
    assert fix in doctor.stdout
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    refused.close()  # nothing listens there now
    record(
        4,
        "index unreachable",
        hvd(tmp_path, "resolve", "--index-url", f"http://127.0.0.1:{port}/simple", "-C", "index-retries=0"),
    )

    # 130: Ctrl-C while waiting on an index that never answers. The command must start with SIGINT
    # caught, as in a terminal: a pytest started in the background (`pytest &` from a script)
    # ignores SIGINT and SIGQUIT, an ignored signal stays ignored across exec, and Python then
    # leaves Ctrl-C ignored too (the command ran its 60 s out). A handler here becomes the
    # default action in the child.
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
    caught = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "selector_backend", "resolve", "--index-url", silent_url, "-C", "index-timeout=60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(tmp_path),
            cwd=ROOT,
        )
    finally:
        signal.signal(signal.SIGINT, caught)
    silent.settimeout(60)
    connection, _ = silent.accept()  # the command waits on the index now, however slowly it started
    time.sleep(0.2)  # its request is sent
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"resolve did not end on SIGINT; its threads: {threads_of(proc.pid)}")
    finally:
        proc.kill()  # nothing to do once it has ended; on a hang it ends it
        proc.wait()
        connection.close()
    record(130, "Ctrl-C", subprocess.CompletedProcess(proc.args, proc.returncode, out, err))

    # 1: a bug — a command that raises something unexpected (in-process: there is no real bug to call)
    from selector_backend.cli.commands import detect

    def broken(args: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(detect, "run", broken)
    monkeypatch.delenv("HVD_SELECTOR_DEBUG", raising=False)
    assert cli.main(["detect"]) == 1
    seen.setdefault(1, []).append("internal error")
    return seen


def test_every_documented_exit_code_is_what_the_commands_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent_server: socket.socket, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = trigger_all(tmp_path, monkeypatch, silent_server)
    assert "internal error: ZeroDivisionError" in capsys.readouterr().err
    assert set(seen) == documented_codes(), (seen, documented_codes())
