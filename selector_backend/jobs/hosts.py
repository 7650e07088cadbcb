"""Where the ranks of a job run: ``-H``/``--hostfile`` host lists and the slot each rank gets.

Every name here ends up as ssh's destination argument, so a host is checked
to be a host name or an IPv4 address before anything else sees it (a
hostfile line ``-oProxyCommand=...`` would otherwise be an ssh option), and
the sizes are checked before any list is built from them.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from selector_backend.files import safeparse

LOCAL_HOSTS = ("localhost", "127.0.0.1")
MAX_RANKS = 1 << 16  # ranks in one job: far above any real job, far below what would exhaust the launcher
MAX_HOSTFILE_BYTES = 1 << 20
# RFC 1123 labels (letters, digits, hyphens; no leading hyphen), plus the
# underscores some site naming schemes and ssh_config aliases use.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


@dataclass(frozen=True)
class Slot:
    """Where one rank runs."""

    rank: int
    host: str
    local_rank: int
    local_size: int

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


def check_host(name: str, where: str) -> str:
    """``name`` if it is a host name or an IPv4 address, else a one-line ValueError."""
    if len(name) <= 253 and _HOST_NAME.fullmatch(name):
        return name
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    shown = name if name.isprintable() and len(name) <= 80 else repr(name[:80])
    raise ValueError(
        f"{where}: {shown!r} is not a host name or IPv4 address (letters, digits, '-', '_' and '.'; "
        "ssh options and user@ belong in --ssh-config-file)"
    )


def check_num_proc(num_proc: int) -> int:
    """The rank count, refused before anything is sized by it."""
    if num_proc < 1:
        raise ValueError(f"-np must be at least 1 (got {num_proc})")
    if num_proc > MAX_RANKS:
        raise ValueError(f"-np {num_proc} is more ranks than one job may have ({MAX_RANKS})")
    return num_proc


def _entry(item: str, where: str) -> tuple[str, int]:
    """One ``host`` or ``host:slots``."""
    name, sep, slots = item.rpartition(":")
    if not sep:
        name, slots = item, "1"
    if not name or not slots.isdigit() or not 1 <= int(slots) <= MAX_RANKS:
        raise ValueError(f"{where}: {item[:80]!r} must be host or host:slots with 1 <= slots <= {MAX_RANKS}")
    return check_host(name, where), int(slots)


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``host1:2,host2:2`` (slots default to 1), as horovodrun's -H."""
    hosts = [_entry(item.strip(), "-H") for item in text.split(",") if item.strip()]
    if not hosts:
        raise ValueError("-H names no hosts; use -H host1:2,host2:2")
    return hosts


def parse_host_lines(text: str, where: str, default_slots: int = 1) -> list[tuple[str, int]]:
    """Lines of ``host`` (``default_slots`` slots) or ``host:slots``: a host discovery script's output."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [_entry(line if ":" in line else f"{line}:{default_slots}", where) for line in lines if line]


def _read_small_text(path: str) -> str:
    """A regular file of at most MAX_HOSTFILE_BYTES (``files.safeparse``'s one bounded reader: a FIFO,
    a device or a directory is refused before it is read) of UTF-8 text without NUL bytes."""
    data = safeparse.read_bytes(path, "the hostfile", MAX_HOSTFILE_BYTES)
    if b"\0" in data:
        raise ValueError(f"the hostfile {path} holds a NUL byte; pass a text file of 'host slots=N' lines")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the hostfile {path} is not UTF-8 text (byte {exc.start})") from None


def read_hostfile(path: str) -> list[tuple[str, int]]:
    """Lines of ``host slots=N`` or ``host:N`` (``#`` comments), as horovodrun's --hostfile."""
    hosts = []
    for number, line in enumerate(_read_small_text(path).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith("slots="):
            entry = f"{parts[0]}:{parts[1][6:]}"
        elif len(parts) == 1:
            entry = parts[0]
        else:
            raise ValueError(f"{path}:{number}: expected 'host slots=N' or 'host:N', got {line[:80]!r}")
        hosts.append(_entry(entry, f"{path}:{number}"))
    if not hosts:
        raise ValueError(f"the hostfile {path} names no hosts; write lines of 'host slots=N'")
    return hosts


def assign(num_proc: int, hosts: Sequence[tuple[str, int]] | None) -> list[Slot]:
    """Fill hosts in order, as horovodrun does; local ranks count per host."""
    check_num_proc(num_proc)
    if hosts is None:
        return [Slot(r, "localhost", r, num_proc) for r in range(num_proc)]
    capacity = sum(n for _, n in hosts)
    if num_proc > capacity:
        raise ValueError(f"-np {num_proc} is more than the {capacity} slots the hosts offer")
    placed: list[tuple[str, int]] = []
    for host, slots in hosts:
        take = min(slots, num_proc - len(placed))
        placed += [(host, i) for i in range(take)]
    sizes = Counter(h for h, _ in placed)
    return [Slot(r, h, lr, sizes[h]) for r, (h, lr) in enumerate(placed)]
