"""What runs in front of a rank on a remote host: ``python -c SOURCE GRACE COMMAND...`` over ssh.

The launcher sends this file's source, not a module name, so the remote host
needs nothing but the same Python. Over ssh's stdin the stub reads the job
secret (never argv, so never in ps) and then signal numbers: each is passed
to the rank's whole process group at once, and SIGKILL follows after GRACE
seconds if the rank has not ended. When stdin closes (the launcher stopped
the job, died, or its connection dropped), the stub does the same with
SIGTERM: no rank outlives its launcher. When the rank ends, whatever is left
of its process group is killed, and the stub exits with the rank's code.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, byte by byte (a buffered reader would swallow the signal lines after it)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def main() -> int:
    grace, command = float(sys.argv[1]), sys.argv[2:]
    env = dict(os.environ, HVD_SELECTOR_SECRET=_read_line(0).decode().strip())
    try:
        rank = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        reason = "command not found" if isinstance(exc, FileNotFoundError) else exc.strerror
        print(f"hvd-selector run: cannot start {command[0]!r} on {socket.gethostname()}: {reason}", file=sys.stderr)
        return 127
    kill_at: float | None = None

    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(rank.pid, signum)

    def stop(signum: int) -> None:
        nonlocal kill_at
        send(signum)
        if kill_at is None:
            kill_at = time.monotonic() + grace

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: stop(received))
    stdin_open, pending = True, b""
    while rank.poll() is None:
        if kill_at is not None and time.monotonic() >= kill_at:
            send(signal.SIGKILL)
        ready = select.select([0] if stdin_open else [], [], [], 0.1)[0]
        if not ready:
            continue
        data = os.read(0, 64)
        if not data:
            stdin_open = False
            stop(signal.SIGTERM)
            continue
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip().isdigit() and int(line) in signal.valid_signals():
                stop(int(line))
    send(signal.SIGKILL)  # what the rank left behind in its group
    code = rank.returncode
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
