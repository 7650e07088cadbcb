"""hvd-selector run as mpirun and horovodrun behave: a failed rank ends the job, signals reach every
rank, nothing outlives the launcher, output is bounded and passed on as it comes, bad input is one line.

Real processes throughout: the launcher (``python -m selector_backend run``) with the gloo build
installed, and ranks that are small Python scripts (workers/launcher_rank.py).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devtools.native_builds import Build, python, run_argv

from .native_helpers import WORKERS

pytestmark = pytest.mark.slow
RANK = WORKERS / "launcher_rank.py"


def start(build: Build, np_: int, out: Path, mode: str, *args: str, options: tuple[str, ...] = (), **env: str):
    argv = run_argv(np_, RANK, str(out), mode, *args)
    argv[4:4] = options  # after "run -np N"
    return subprocess.Popen(
        argv, cwd=out, env=build.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def wait_for(path: Path, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def processes(out: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(out.glob("pid*")) + sorted(out.glob("child*"))]


def finish(proc: subprocess.Popen[bytes], seconds: float = 30) -> tuple[int, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")


@pytest.mark.parametrize("mode", ["fail", "fail_before_init"])
def test_a_failed_rank_ends_the_job_within_two_seconds(gloo_build: Build, tmp_path: Path, mode: str) -> None:
    """Rank 1 exits non-zero while the others hang (in a sleep, or in init() waiting for it, with the
    default 60 s timeout): the launcher names it at once and the job is over within 2 s."""
    proc = start(gloo_build, 3, tmp_path, mode, HVD_SELECTOR_TIMEOUT="60")
    code, _, err = finish(proc)
    ended = time.time()
    failed_at = float((tmp_path / "failed_at").read_text())
    assert ended - failed_at < 2.0, (ended - failed_at, err)
    expected = 3 if mode == "fail" else 1
    assert code == expected, err
    assert f"rank 1 on host {socket.gethostname()} exited with code {expected}; stopping the job" in err, err
    assert not [pid for pid in processes(tmp_path) if alive(pid)], "a rank or its child outlived the job"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_reaches_every_rank_and_nothing_outlives_the_launcher(
    gloo_build: Build, tmp_path: Path, signum: signal.Signals
) -> None:
    proc = start(gloo_build, 2, tmp_path, "signals")
    for r in range(2):
        wait_for(tmp_path / f"child{r}", proc)
    proc.send_signal(signum)
    code, out, err = finish(proc)
    assert code == 128 + signum, err
    assert [(tmp_path / f"signal{r}").read_text() for r in range(2)] == [signum.name] * 2
    assert f"rank 0 got {signum.name}" in out and f"rank 1 got {signum.name}" in out  # their last words
    assert f"hvd-selector run: got {signum.name}: passed it to rank(s) 0,1" in err, err
    assert not [pid for pid in processes(tmp_path) if alive(pid)], "a rank or its child outlived the launcher"


def test_a_rank_that_ignores_the_signal_is_killed_after_the_grace_period(gloo_build: Build, tmp_path: Path) -> None:
    proc = start(gloo_build, 2, tmp_path, "signals", "ignore", options=("--grace-period", "1"))
    for r in range(2):
        wait_for(tmp_path / f"child{r}", proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == 143, err
    assert time.monotonic() - sent < 4.0
    assert "rank(s) 1 did not end within 1s: SIGKILL" in err, err
    assert not [pid for pid in processes(tmp_path) if alive(pid)]


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_an_mpi_build_s_ranks_get_the_signal_and_end_with_the_launcher(
    impl: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The signal goes to mpiexec, which passes it on; a rank ignoring it is gone when the launcher
    returns (before: MPICH's mpiexec returned first and left it running). The grace period is 3 s, not 1:
    the signal takes two hops (launcher, mpiexec, rank) and, on a loaded machine, a 1 s grace once
    ended rank 0 before mpiexec had passed it on (no signal0)."""
    build = request.getfixturevalue(f"{impl}_build")
    proc = start(build, 2, tmp_path, "signals", "ignore", options=("--grace-period", "3"))
    for r in range(2):
        wait_for(tmp_path / f"child{r}", proc)
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == 143, err
    assert (tmp_path / "signal0").read_text() == "SIGTERM"
    assert f"hvd-selector run: got SIGTERM: passed it to mpiexec.{impl}" in err, err
    assert not [pid for pid in processes(tmp_path) if alive(pid)], "a rank or its child outlived the launcher"


def test_ranks_die_with_a_killed_launcher(gloo_build: Build, tmp_path: Path) -> None:
    """SIGKILL leaves the launcher no chance to stop anything: the kernel ends its ranks (PR_SET_PDEATHSIG)."""
    proc = start(gloo_build, 2, tmp_path, "signals")
    for r in range(2):
        wait_for(tmp_path / f"pid{r}", proc)
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    proc.kill()
    finish(proc)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]


LEFT_BEHIND = (
    "sleep 300 & echo $! > bg$HVD_SELECTOR_RANK; "
    'setsid bash -c "sleep 301 & echo \\$! > daemon$HVD_SELECTOR_RANK"; '
    "echo $$ > pid$HVD_SELECTOR_RANK; exec sleep {last}"
)


@pytest.mark.parametrize("end", ["launcher SIGKILLed", "rank exits"])
def test_nothing_a_rank_started_outlives_the_launcher(gloo_build: Build, tmp_path: Path, end: str) -> None:
    """Issue 36: ``run -np 2 bash -c 'sleep 300 & exec sleep 120'``, then the launcher gets SIGKILL: before,
    both ``sleep 300`` lived on with ppid 1. Each rank also leaves a daemon in a session of its own
    (``setsid``), out of its process group: the supervisor adopts it and ends it too. And a rank that
    simply ends takes both with it."""
    argv = [sys.executable, "-m", "selector_backend", "run", "-np", "2", "--grace-period", "1", "bash", "-c"]
    argv.append(LEFT_BEHIND.format(last=120 if end == "launcher SIGKILLed" else 1))
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=gloo_build.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    names = [f"{what}{r}" for what in ("bg", "daemon", "pid") for r in range(2)]
    if end == "launcher SIGKILLed":
        for name in names:
            wait_for(tmp_path / name, proc)
        proc.kill()
    finish(proc)
    pids = [int((tmp_path / name).read_text()) for name in names]
    deadline = time.monotonic() + 10  # the grace period (1 s), then SIGKILL
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {name: pid for name, pid in zip(names, pids, strict=True) if alive(pid)}
    with contextlib.suppress(ProcessLookupError):
        for pid in left.values():
            os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived the launcher: {left}"


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_512_mb_without_a_newline_keeps_the_launcher_small(gloo_build: Build, tmp_path: Path) -> None:
    """The launcher holds at most output.CHUNK_BYTES of a stream: its peak RSS stays far under the
    100 MiB docs/guide/launcher.md states, while every byte reaches its stdout."""
    total = 512 << 20
    proc = start(gloo_build, 1, tmp_path, "flood", str(total))
    got = [0]

    def drain() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(1 << 20):
            got[0] += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    wait_for(tmp_path / "written", proc, seconds=120)
    peak = _peak_rss_kib(proc.pid)  # the launcher itself: run_argv's python -m selector_backend run
    (tmp_path / "go").write_text("")
    # not finish(): its communicate() would read stdout beside the drain thread and take bytes from the count
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(60)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr is not None else ""
    assert code == 0, err
    assert got[0] == total
    assert peak < 100 << 10, f"launcher peak RSS {peak} KiB"


@pytest.mark.parametrize("label", [False, True])
def test_a_carriage_return_progress_bar_shows_as_it_comes(gloo_build: Build, tmp_path: Path, label: bool) -> None:
    proc = start(gloo_build, 1, tmp_path, "progress", options=("--label-output",) if label else ())
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 15
    while b"step 1" not in seen:  # the rank waits for "go": nothing but the bar so far, no newline
        assert time.monotonic() < deadline and proc.poll() is None, seen
        if select.select([proc.stdout], [], [], 0.1)[0]:
            seen += os.read(proc.stdout.fileno(), 100)
    (tmp_path / "go").write_text("")
    code, out, err = finish(proc)
    assert code == 0, err
    whole = (seen.decode() + out).replace("\r", "<CR>")
    assert whole == ("<CR>[0] step 1<CR>[0] step 2\n" if label else "<CR>step 1<CR>step 2\n"), whole


def test_two_ranks_never_share_a_line(gloo_build: Build, tmp_path: Path) -> None:
    proc = start(gloo_build, 2, tmp_path, "interleave", options=("--label-output",))
    code, out, err = finish(proc)
    assert code == 0, err
    assert out == "[0] abc\n[1] line\n", out


def test_output_filename_writes_each_rank_to_its_own_files(gloo_build: Build, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = start(gloo_build, 2, tmp_path, "files", options=("--output-filename", str(logs)))
    code, out, err = finish(proc)
    assert code == 0, err
    assert sorted(out.splitlines()) == ["out 0", "out 1"]  # the terminal still gets it
    for r in range(2):
        assert (logs / f"rank.{r}" / "stdout").read_text() == f"out {r}\n"
        assert (logs / f"rank.{r}" / "stderr").read_text() == f"err {r}\n"


def _run(build: Build, cwd: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start_time = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "run", *args],
        cwd=cwd,
        env=build.env(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc, time.monotonic() - start_time


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo")


def _nul(tmp: Path) -> str:
    (tmp / "nul").write_bytes(b"node1 slots=2\n\0node2\n")
    return str(tmp / "nul")


def _proxy(tmp: Path) -> str:
    (tmp / "hosts").write_text(f"127.0.0.2 slots=1\n-oProxyCommand=touch${{IFS}}{tmp}/pwned slots=1\n")
    return str(tmp / "hosts")


@pytest.mark.parametrize(
    "hostfile,text",
    [
        (_fifo, "the hostfile is a FIFO (named pipe), not a regular file"),
        (lambda tmp: "/dev/zero", "the hostfile is a character device, not a regular file"),
        (lambda tmp: str(tmp), "the hostfile is a directory, not a regular file"),
        (_nul, "holds a NUL byte"),
        (_proxy, "'-oProxyCommand=touch"),
    ],
    ids=["fifo", "dev-zero", "directory", "nul", "ssh-option"],
)
def test_a_bad_hostfile_is_one_line_at_once(gloo_build: Build, tmp_path: Path, hostfile, text: str) -> None:
    proc, elapsed = _run(gloo_build, tmp_path, "-np", "2", "--hostfile", hostfile(tmp_path), "true")
    assert proc.returncode == 2 and elapsed < 5, (proc.returncode, elapsed, proc.stderr)
    assert text in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "args,env,text",
    [
        (("-np", "2", "no-such-program"), {}, "cannot run no-such-program: command not found on this host's PATH"),
        (("-np", "99999999999999999999", "true"), {}, "-np 99999999999999999999 is more ranks than one job may have"),
        (("-np", "2", "--hosts=-oProxyCommand=x:1", "true"), {}, "'-oProxyCommand=x' is not a host name"),
        (("-np", "2", "true"), {"HVD_SELECTOR_SHM_SLOT": "5"}, "HVD_SELECTOR_SHM_SLOT=5 must be a byte count"),
        (("-np", "2", "true"), {"HVD_SELECTOR_SHM": "maybe"}, "HVD_SELECTOR_SHM=maybe must be 0 or 1"),
        (
            ("-np", "2", "true"),
            {"HVD_SELECTOR_SHM_DIRECT": "on"},
            "HVD_SELECTOR_SHM_DIRECT=on must be 0, 1, all or auto",
        ),
        (("-np", "2", "--grace-period", "0", "true"), {}, "--grace-period must be a positive number"),
        (("-np", "2", "--output-filename", "logs", "true"), {}, "cannot write logs/rank.0/stdout: Too many levels"),
    ],
    ids=["no-program", "huge-np", "ssh-option-host", "shm-slot", "shm", "shm-direct", "grace", "output-link"],
)
def test_bad_input_is_one_line_before_any_rank_starts(
    gloo_build: Build, tmp_path: Path, args: tuple[str, ...], env: dict[str, str], text: str
) -> None:
    (tmp_path / "logs" / "rank.0").mkdir(parents=True)
    (tmp_path / "logs" / "rank.0" / "stdout").symlink_to(tmp_path / "elsewhere")  # planted: never written through
    proc, elapsed = _run(gloo_build, tmp_path, *args, **env)
    assert not (tmp_path / "elsewhere").exists()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("hvd-selector: error: ") and text in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Errno" not in proc.stderr, proc.stderr
    assert elapsed < 10


@pytest.mark.parametrize(
    "name,value",
    [("HVD_SELECTOR_SHM_SLOT", v) for v in ("5", "131071", "131072", "1073741824", "1073741825", "abc", "0")]
    + [("HVD_SELECTOR_SHM_DIRECT", v) for v in ("0", "1", "all", "auto", "on", "2")],
)
def test_the_launcher_refuses_the_shm_settings_the_core_refuses(
    gloo_build: Build, tmp_path: Path, name: str, value: str
) -> None:
    """rank_settings.check states the core's rule (shm_backend.cpp): both accept and refuse the same values."""
    from selector_backend.jobs import rank_settings

    try:
        rank_settings.check({name: value})
        launcher_error = ""
    except ValueError as exc:
        launcher_error = str(exc)
    core = python(
        gloo_build,
        "import hvd_selector as h\ntry:\n h.init()\nexcept ValueError as e:\n print(e)",
        cwd=tmp_path,
        **{name: value},
    )
    assert core.returncode == 0, core.stderr
    core_error = core.stdout.strip().removeprefix("rank 0: ")
    assert core_error == launcher_error
