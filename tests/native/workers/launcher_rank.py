"""A rank for the launcher's tests: python launcher_rank.py OUT_DIR MODE.

Writes OUT_DIR/pid<rank> (and the pid of a child it keeps in its process
group, OUT_DIR/child<rank>) once it runs, then:

- ``fail``: rank 1 writes the time and exits 3; the others sleep (a hung job);
- ``fail_before_init``: rank 1 exits 1; the others call hvd_selector.init(), which waits for it;
- ``signals``: records the first signal it gets (OUT_DIR/signal<rank>), prints a last
  line and exits 128 + N; with ``ignore``, rank 1 ignores SIGTERM (the launcher must SIGKILL it);
- ``flood``: rank 0 writes BYTES (argv[3]) without a newline, 1 MiB at a time, then
  writes OUT_DIR/written and waits for OUT_DIR/go;
- ``progress``: rank 0 writes ``\\rstep 1`` and waits for OUT_DIR/go, then ``\\rstep 2\\n``;
- ``interleave``: rank 0 writes ``abc`` (no newline), then rank 1 writes a whole line;
- ``files``: each rank writes one line to stdout and one to stderr.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
rank = int(next(os.environ[k] for k in ("HVD_SELECTOR_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK") if k in os.environ))


def wait_for(name: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not (out / name).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def started() -> None:
    child = subprocess.Popen(["sleep", "60"])  # in the rank's process group: must not outlive the job
    (out / f"child{rank}").write_text(str(child.pid))
    (out / f"pid{rank}").write_text(str(os.getpid()))


if mode == "fail":
    started()
    if rank == 1:
        wait_for("pid0")
        (out / "failed_at").write_text(repr(time.time()))
        sys.exit(3)
    time.sleep(60)
elif mode == "fail_before_init":
    started()
    if rank == 1:
        wait_for("pid0")
        time.sleep(0.5)  # rank 0 is inside init() by now, waiting for this rank
        (out / "failed_at").write_text(repr(time.time()))
        sys.exit(1)
    import hvd_selector as hvd

    hvd.init()
elif mode == "signals":

    def record(signum: int, _frame: object) -> None:
        (out / f"signal{rank}").write_text(signal.Signals(signum).name)
        print(f"rank {rank} got {signal.Signals(signum).name}", flush=True)
        os._exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, record)
    if rank == 1 and sys.argv[3:] == ["ignore"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started()
    print(f"rank {rank} up", flush=True)
    time.sleep(60)
elif mode == "flood":
    if rank == 0:
        block = b"x" * (1 << 20)
        total = int(sys.argv[3])
        for _ in range(total // len(block)):
            os.write(1, block)
        (out / "written").write_text("")
        wait_for("go")
elif mode == "progress":
    if rank == 0:
        os.write(1, b"\rstep 1")
        wait_for("go")
        os.write(1, b"\rstep 2\n")
elif mode == "interleave":
    if rank == 0:
        os.write(1, b"abc")
        (out / "partial").write_text("")
        wait_for("line")
    else:
        wait_for("partial")
        time.sleep(0.3)  # the launcher has passed rank 0's partial line on
        os.write(1, b"line\n")
        (out / "line").write_text("")
elif mode == "files":
    print(f"out {rank}", flush=True)
    print(f"err {rank}", file=sys.stderr, flush=True)
