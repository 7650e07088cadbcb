"""Passing the ranks' output on: to the launcher's terminal, and to per-rank files.

Why chunks, not lines: a rank that writes 512 MB without a newline must not
make the launcher hold 512 MB. Each rank's stream is read at most CHUNK_BYTES
at a time and passed on at once, so the launcher holds at most CHUNK_BYTES per
stream whatever the ranks write, and a ``\\r`` progress bar (tqdm) shows as it
comes. Two ranks still never share a line: a rank's unfinished line (text
after its last ``\\n``, or a ``\\r`` bar) stays its own until another rank
writes to the same terminal, which first ends that line with a ``\\n``.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import IO

from selector_backend.jobs.limits import CHUNK_BYTES

_PIECES = re.compile(rb"([^\r\n]*)([\r\n]?)")


class Terminal:
    """One of the launcher's output streams (stdout or stderr), shared by every rank."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.owner: object | None = None  # the rank whose line is unfinished, if any
        self.at_start = False  # the owner's last piece ended with \r: its next text starts the line again
        # the rank whose unfinished line this terminal ended for another rank's output: the \n it sends
        # next is already written (an unbuffered print sends "text" and "\n" as two writes)
        self.cut: object | None = None
        self.broken = False  # the reader went away (a closed pipe): output is dropped, ranks keep running

    def write(self, who: object, label: bytes, data: bytes) -> None:
        """``data`` from rank ``who``, each line prefixed with ``label`` (whole, while other ranks wait)."""
        with self.lock:
            if self.cut == who:
                self.cut = None
                data = data.removeprefix(b"\n")
                if not data:
                    return
            if not label and (self.owner is None or self.owner == who):  # nothing to add: passed on as it came
                self._emit(data)
                if data.endswith(b"\n"):
                    self.owner, self.at_start = None, False
                elif data:
                    self.owner, self.at_start = who, data.endswith(b"\r")
                return
            out: list[bytes] = []
            for match in _PIECES.finditer(data):
                text, end = match.group(1), match.group(2)
                if not text and not end:
                    continue
                if self.owner is not None and self.owner != who:
                    out.append(b"\n")  # another rank's unfinished line ends before this rank's output
                    self.owner, self.cut = None, self.owner
                if text:
                    if self.owner is None or self.at_start:
                        out.append(label)
                    out.append(text)
                elif end == b"\n" and self.owner is None:
                    out.append(label)  # an empty line, labelled like the others
                out.append(end)
                if end == b"\n":
                    self.owner, self.at_start = None, False
                else:
                    self.owner, self.at_start = who, end == b"\r"
            self._emit(b"".join(out))

    def _emit(self, data: bytes) -> None:
        if self.broken or not data:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.broken = True

    def finish(self) -> None:
        """End an unfinished line, so the launcher's own message starts on a line of its own."""
        with self.lock:
            if self.owner is not None:
                self.owner, self.cut = None, self.owner
                self._emit(b"\n")


def relay(fd: int, terminal: Terminal, who: object, label: bytes, copy: IO[bytes] | None = None) -> None:
    """Pass a rank's stream on until it closes: to ``terminal`` and, raw, to ``copy`` (--output-filename)."""
    try:
        while True:
            try:
                data = os.read(fd, CHUNK_BYTES)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            if copy is not None:
                try:
                    copy.write(data)
                except OSError:
                    copy = None  # a full disk stops the file copy, never the rank
            terminal.write(who, label, data)
    finally:
        os.close(fd)
        if copy is not None:
            copy.close()


def output_files(directory: str, num_proc: int) -> list[tuple[IO[bytes], IO[bytes]]]:
    """``DIRECTORY/rank.<rank>/stdout`` and ``.../stderr`` for every rank, rank zero-padded (as horovodrun's
    --output-filename), created before any rank starts: a problem is one ValueError, not a half-started job.

    A symbolic link where a file goes is refused (O_NOFOLLOW): the launcher never writes through a link
    someone planted in a shared directory.
    """
    width = len(str(num_proc - 1))
    files: list[tuple[IO[bytes], IO[bytes]]] = []
    try:
        for rank in range(num_proc):
            folder = Path(directory) / f"rank.{rank:0{width}d}"
            folder.mkdir(parents=True, exist_ok=True)
            pair = []
            for name in ("stdout", "stderr"):
                fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
                pair.append(os.fdopen(fd, "wb", buffering=0))
            files.append((pair[0], pair[1]))
    except OSError as exc:
        for both in files:
            for handle in both:
                handle.close()
        where = exc.filename or directory
        raise ValueError(f"--output-filename: cannot write {where}: {exc.strerror or exc}") from None
    return files
