"""``hvd-selector run -np N cmd ...``: start N ranks of this build on this host.

Gloo builds: the launcher runs the authenticated rendezvous store
(rendezvous.StoreServer), gives each rank its identity and the one-time
secret through the environment, and watches the ranks: when one fails, the
others get a grace period to report their own error (they see the dead peer
at once) and are then terminated, so a job never outlives its first failure
by more than the timeout. MPI builds defer to the mpiexec of the MPI the
core was linked against.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from ._facts import BuildFacts, load_facts
from .rendezvous import StoreServer

POLL_SECONDS = 0.05
KILL_AFTER_SECONDS = 5.0


def uses_mpiexec(facts: BuildFacts) -> bool:
    """MPI tensor ops, or an MPI-only controller set, start through mpiexec."""
    return facts.tensor_ops == "mpi" or "gloo" not in facts.controllers


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + KILL_AFTER_SECONDS
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch_gloo(num_proc: int, command: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` as ``num_proc`` local ranks; the first failing rank's exit code wins."""
    secret = secrets.token_bytes(32)
    server = StoreServer(secret).start()
    host, port = server.address
    base = dict(os.environ if env is None else env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(num_proc):
            rank_env = dict(base)
            rank_env.update(
                {
                    "HVD_SELECTOR_RANK": str(rank),
                    "HVD_SELECTOR_SIZE": str(num_proc),
                    "HVD_SELECTOR_LOCAL_RANK": str(rank),
                    "HVD_SELECTOR_LOCAL_SIZE": str(num_proc),
                    "HVD_SELECTOR_RENDEZVOUS": f"{host}:{port}",
                    "HVD_SELECTOR_SECRET": secret.hex(),
                    "HVD_SELECTOR_TIMEOUT": f"{timeout:g}",
                }
            )
            procs.append(subprocess.Popen(list(command), env=rank_env))
        first_failure: int | None = None
        deadline: float | None = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            if first_failure is None:
                failed = [c for c in codes if c not in (None, 0)]
                if failed:
                    first_failure = _exit_code(failed[0])
                    deadline = time.monotonic() + timeout + 2.0
            elif deadline is not None and time.monotonic() > deadline:
                print(
                    f"hvd-selector run: a rank failed (exit {first_failure}); stopping the ranks still "
                    f"running after {timeout:g}s",
                    file=sys.stderr,
                )
                _stop(procs)
                break
            time.sleep(POLL_SECONDS)
        if first_failure is None:
            failed = [_exit_code(p.returncode) for p in procs if p.returncode]
            first_failure = failed[0] if failed else 0
        return first_failure
    except KeyboardInterrupt:
        _stop(procs)
        return 130
    finally:
        server.stop()


def mpiexec_command(mpiexec: str, num_proc: int, command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The mpiexec line and extra environment (Open MPI needs flags MPICH does not)."""
    extra_env: dict[str, str] = {}
    args = [mpiexec, "-np", str(num_proc)]
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        if num_proc > (os.cpu_count() or 1):
            args.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            extra_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return args + list(command), extra_env


def launch_mpi(
    facts: BuildFacts,
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Defer to the mpiexec of the MPI this build linked (recorded at build time)."""
    exe = mpiexec or facts.config.get("mpiexec") or shutil.which("mpiexec") or ""
    if not exe or not (os.path.exists(exe) or shutil.which(exe)):
        raise FileNotFoundError(
            f"mpiexec {exe or '(none recorded)'} not found; this is an MPI build: "
            "install its MPI runtime or pass --mpiexec PATH"
        )
    args, extra_env = mpiexec_command(exe, num_proc, command)
    run_env = dict(os.environ if env is None else env)
    run_env.update(extra_env)
    run_env["HVD_SELECTOR_TIMEOUT"] = f"{timeout:g}"
    try:
        return _exit_code(subprocess.call(args, env=run_env))
    except KeyboardInterrupt:
        return 130


def launch(
    num_proc: int,
    command: Sequence[str],
    timeout: float,
    mpiexec: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    facts = load_facts()
    if uses_mpiexec(facts) or mpiexec:
        return launch_mpi(facts, num_proc, command, timeout, mpiexec, env)
    return launch_gloo(num_proc, command, timeout, env)
