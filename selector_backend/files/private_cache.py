"""The user's cache directory, opened so that no other user can steer what is read, written or removed.

The backend keeps decisions there (the install plan, parsed index pages, the
catalog's parsed TOML) that steer what gets installed, the wheels it installs,
and the locks concurrent installs share. Another local user may have created
the directory first (``HVD_SELECTOR_CACHE_DIR=/tmp/shared``), planted a
symbolic link in it (``plans -> ~/project``) or opened a lock file to hold it.
So:

- every directory is opened once, as a handle (``O_DIRECTORY|O_NOFOLLOW``), and
  checked on that handle (``fstat``): it must be this user's, writable by
  nobody else, and not a symbolic link; everything under it is reached from
  the handle (``dir_fd``), never by a path that could be re-pointed between a
  check and its use. The cache directory itself may be a link of this user's
  own (a cache moved to a larger disk); a link anyone else owns is refused;
- a file is read only when it is a regular file, this user's, writable by
  nobody else, and not a link (``O_NOFOLLOW``); written as a temporary file
  created exclusively beside it and renamed into place; removed with
  ``unlinkat``, which removes a link, never what it points at;
- a lock file is this user's, mode 0600 in a 0700 directory, so no other user
  can open it; one that is not (left by an earlier release, 0644) is replaced
  before it is used, and a wait for a lock is bounded.

A directory that fails a check is an ``UntrustedCacheError`` naming it and
what to do; callers whose cache is only a shortcut (plans, parsed pages,
memos) go on without it. New directories are made 0700. The directories
above the cache directory are the kernel's to resolve: keep the cache under a
directory only you (and root) can change, as the default is.

Imports nothing heavy: the catalog memo is read on every cold start.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Literal

from selector_backend.errors import ExternalError, InputError

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
MAX_CACHED_BYTES = 1 << 30
#: A temporary file younger than this may be another process's write in flight.
ABANDONED_S = 600.0
HINT = "set cache-dir (HVD_SELECTOR_CACHE_DIR) to a directory of your own"

_active: Path | None = None


class UntrustedCacheError(InputError):
    """A directory of the cache is another user's, writable by others, or a link: nothing in it is used."""


class CacheLockTimeout(ExternalError):
    """A cache lock stayed held past its wait (another process of this user is using the file)."""


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/hvd-selector`` (default ``~/.cache/hvd-selector``); the settings' cache-dir default."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hvd-selector"


def use_cache_dir(path: Path) -> None:
    """Record the cache directory of this process's settings (``settings.load_settings`` does).

    Process-wide on purpose, and the only such state: the catalog memo (``tomlfile``) is read
    below every caller that holds Settings, on a cold start, where passing a directory down
    would put a settings argument on every catalog read. The rule of *where* the cache is stays
    one (``default_cache_dir`` and the cache-dir setting); this only remembers its answer, and a
    process that loaded no settings keeps no memo."""
    global _active
    _active = path


def active_cache_dir() -> Path | None:
    """The cache directory of this process's settings, or None when none were loaded."""
    return _active


def keyed_name(key: str, suffix: str) -> str:
    """The file name of what is kept under ``key`` (a hex digest): its first 32 digits, then ``suffix``."""
    return f"{key[:32]}{suffix}"


def is_keyed_name(name: str, suffix: str) -> bool:
    """A name ``keyed_name`` makes: 32 hex digits and ``suffix`` (pruning removes nothing else)."""
    return len(name) == 32 + len(suffix) and name.endswith(suffix) and all(c in "0123456789abcdef" for c in name[:32])


def trusted(info: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _distrust(path: Path, info: os.stat_result) -> str | None:
    """Why the directory ``info`` describes cannot be trusted, or None."""
    from selector_backend.files.safeparse import file_kind

    if not stat.S_ISDIR(info.st_mode):
        return f"is {file_kind(info.st_mode)}, not a directory"
    if info.st_uid != os.getuid():
        return f"is owned by {_owner(info.st_uid)}, not by you"
    if info.st_mode & 0o022:
        who = " and ".join(w for bit, w in ((0o020, "its group"), (0o002, "other users")) if info.st_mode & bit)
        return f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


class Tally:
    """What ``CacheDir.sweep`` found (or removed): files, their bytes, and what it left, with why."""

    __slots__ = ("bytes", "files", "left")

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0
        self.left: list[str] = []

    def add(self, other: Tally) -> None:
        self.files += other.files
        self.bytes += other.bytes
        self.left += other.left

    def leave(self, path: Path, why: str) -> None:
        self.left.append(f"{path} ({why})")


class CacheDir:
    """One checked directory of the cache, held open; what is under it is reached through ``fd``."""

    __slots__ = ("fd", "path", "root")

    def __init__(self, fd: int, path: Path, root: Path) -> None:
        self.fd = fd
        self.path = path
        self.root = root

    def __enter__(self) -> CacheDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _untrusted(self, path: Path, why: str) -> UntrustedCacheError:
        where = f"cache-dir {self.root}" if path == self.root else f"cache-dir {self.root}: {path}"
        fix = HINT if path == self.root else f"remove it (hvd-selector cache clean) or {HINT}"
        return UntrustedCacheError(f"{where} {why}; not using it: {fix}")

    def _checked(self, fd: int, path: Path, private: bool) -> CacheDir:
        info = os.fstat(fd)
        why = _distrust(path, info)
        if why is not None:
            os.close(fd)
            raise self._untrusted(path, why)
        if private and info.st_mode & 0o077:
            os.fchmod(fd, 0o700)
        return CacheDir(fd, path, self.root)

    # ------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Path, *, create: bool) -> CacheDir | None:
        """The cache directory ``path``, checked (made 0700 when ``create`` and absent; else None).

        An OSError (a file in the way, no permission) is the caller's to word."""
        path = Path(path)
        probe = cls(-1, path, path)
        try:
            fd = os.open(path, _DIR_FLAGS | _NOFOLLOW)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(path, mode=0o700, exist_ok=True)
            fd = os.open(path, _DIR_FLAGS | _NOFOLLOW)
        except OSError as exc:
            if not os.path.islink(path):
                raise
            link = os.lstat(path)
            if link.st_uid not in (os.getuid(), 0):
                raise probe._untrusted(path, f"is a symbolic link owned by {_owner(link.st_uid)}") from exc
            fd = os.open(path, _DIR_FLAGS)  # the user's own link (a cache moved to another disk): its target is checked
        return probe._checked(fd, path, private=False)

    def child(self, name: str, *, create: bool, private: bool = False) -> CacheDir | None:
        """The subdirectory ``name``, checked (made 0700 when ``create`` and absent; else None).

        ``private`` also takes every permission from group and others (the locks)."""
        path = self.path / name
        try:
            fd = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=self.fd)
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=self.fd)
            made = self.child(name, create=False, private=private)
            if made is None:
                raise
            return made
        except OSError as exc:
            info = self.lstat(name)
            if info is None:
                raise
            raise self._untrusted(path, _distrust(path, info) or f"cannot be opened ({exc.strerror})") from None
        return self._checked(fd, path, private)

    # ------------------------------------------------------------ entries
    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed), or None."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return None

    def entries(self) -> list[tuple[str, os.stat_result]]:
        """Every entry with its own ``lstat`` (links not followed), in name order."""
        out = []
        for name in sorted(os.listdir(self.fd)):
            info = self.lstat(name)
            if info is not None:
                out.append((name, info))
        return out

    def remove(self, name: str) -> bool:
        """Remove the entry ``name`` (a link itself, never its target; a directory only when empty)."""
        try:
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(name, dir_fd=self.fd)
            else:
                os.unlink(name, dir_fd=self.fd)
            return True
        except OSError:
            return False

    def open_file(self, name: str) -> int | None:
        """A read-only descriptor of the regular file ``name`` that this user owns and nobody else
        can write, or None (absent, a link, another kind of file, someone else's)."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not trusted(info):
            os.close(fd)
            return None
        return fd

    def read(self, name: str, max_age_s: float | None = None, max_bytes: int = MAX_CACHED_BYTES) -> bytes | None:
        """The bytes of ``name`` (``open_file``'s rules), or None; also None when older than ``max_age_s``."""
        from selector_backend.files.safeparse import read_fd

        fd = self.open_file(name)
        if fd is None:
            return None
        try:
            if max_age_s is not None and time.time() - os.fstat(fd).st_mtime > max_age_s:
                return None
            return read_fd(fd, str(self.path / name), "cached file", max_bytes)
        except InputError:
            return None
        finally:
            os.close(fd)

    def new_file(self, prefix: str, suffix: str) -> tuple[int, str]:
        """A new private (0600) file beside the others, created exclusively: (read-write descriptor, name)."""
        while True:
            name = f"{prefix}{os.getpid()}-{os.urandom(6).hex()}{suffix}"
            try:
                flags = (_NEW_FILE_FLAGS & ~os.O_WRONLY) | os.O_RDWR
                return os.open(name, flags, 0o600, dir_fd=self.fd), name
            except FileExistsError:
                continue

    def rename(self, old: str, new: str) -> None:
        os.replace(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def write(self, name: str, data: bytes, *, durable: bool = False) -> None:
        """Replace ``name`` with ``data`` atomically (a temporary file renamed into place).

        ``durable=False`` skips the fsync: for a cache whose reader checks what it
        loads, a file a crash left empty is only a miss."""
        from selector_backend.files.atomic import fill

        fd, tmp = self.new_file(f".{name}.", ".tmp")
        try:
            fill(fd, data, durable=durable)
            self.rename(tmp, name)
        except BaseException:
            self.remove(tmp)
            raise

    def prune(
        self,
        is_entry: Callable[[str], bool],
        *,
        keep: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Remove the regular files ``is_entry`` names that are older than ``max_age_s`` or not among the
        newest ``keep``, and the temporary files a killed writer left (``ABANDONED_S``). Nothing else
        is touched: not a file of another name, not a link, not a directory. Returns how many went."""
        now = time.time()
        aged: list[tuple[float, str]] = []
        removed = 0
        for name, info in self.entries():
            if not stat.S_ISREG(info.st_mode):
                continue
            if name.startswith(".") and name.endswith(".tmp") and is_entry(name[1:-4].rsplit(".", 1)[0]):
                if now - info.st_mtime > ABANDONED_S:  # a temporary file of ``write``
                    removed += self.remove(name)
            elif is_entry(name):
                if max_age_s is not None and now - info.st_mtime > max_age_s:
                    removed += self.remove(name)
                else:
                    aged.append((info.st_mtime, name))
        if keep is not None:
            for _, name in sorted(aged, reverse=True)[keep:]:
                removed += self.remove(name)
        return removed

    # ------------------------------------------------------------ what is kept, emptying
    def sweep(
        self,
        *,
        remove: bool,
        select: Callable[[str], bool] | None = None,
        hold: Callable[[str], contextlib.AbstractContextManager[bool]] | None = None,
        depth: int = 0,
    ) -> Tally:
        """Count the files under this directory (``select``: only the entries it names) and, with
        ``remove``, remove them. Links are removed, never followed; a directory is entered only
        when it passes the checks, and emptied before it is removed; ``hold(name)`` is held while an
        entry is removed (a lock: False means in use, and the entry is left)."""
        tally = Tally()
        for name, info in self.entries():
            if select is not None and not select(name):
                continue
            with hold(name) if hold is not None and remove else contextlib.nullcontext(True) as free:
                if not free:
                    tally.leave(self.path / name, "in use")
                elif stat.S_ISDIR(info.st_mode):
                    self._sweep_directory(name, tally, remove, depth)
                elif not remove or self.remove(name):
                    tally.files += 1
                    tally.bytes += info.st_size if stat.S_ISREG(info.st_mode) else 0
                else:
                    tally.leave(self.path / name, "cannot be removed")
        return tally

    def _sweep_directory(self, name: str, tally: Tally, remove: bool, depth: int) -> None:
        try:
            child = self.child(name, create=False) if depth < 4 else None
        except (OSError, UntrustedCacheError):
            if not (remove and self.remove(name)):  # an empty directory of another user's still goes
                info = self.lstat(name)
                tally.leave(self.path / name, (_distrust(self.path / name, info) if info else None) or "cannot be read")
            return
        if child is None:
            tally.leave(self.path / name, "nested deeper than the cache ever is")
            return
        with child:
            tally.add(child.sweep(remove=remove, depth=depth + 1))
        if remove:
            self.remove(name)

    # ------------------------------------------------------------ locks
    def _lock_file(self, name: str) -> int:
        """A descriptor of the lock file ``name``: this user's, 0600, a regular file. One that is not
        (an earlier release made them 0644, which let any user hold them) is replaced first."""
        import fcntl  # noqa: F401 (POSIX only; the error on other systems names the module)

        for _ in range(8):
            fd = os.open(name, os.O_RDWR | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=self.fd)
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
                return fd
            os.close(fd)
            fresh, tmp = self.new_file(f".{name}.", ".tmp")
            os.close(fresh)
            self.rename(tmp, name)
        raise self._untrusted(self.path / name, "keeps being replaced")

    @contextlib.contextmanager
    def lock(self, name: str, wait_s: float) -> Iterator[None]:
        """Hold the lock ``name`` (an exclusive ``flock``), waiting at most ``wait_s`` for it."""
        end = time.monotonic() + wait_s
        while True:
            fd = self._lock_file(name)
            try:
                if not flock_until(fd, end):
                    raise self._timeout(name, fd, wait_s)
                now = self.lstat(name)
                held = os.fstat(fd)
                if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    break  # still the file the name points at (not replaced or cleaned meanwhile)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)  # closing releases the flock

    @contextlib.contextmanager
    def try_lock(self, name: str) -> Iterator[bool]:
        """Hold the lock ``name`` if nobody does (True), else do nothing (False)."""
        import fcntl

        fd = self._lock_file(name)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _timeout(self, name: str, fd: int, wait_s: float) -> CacheLockTimeout:
        return CacheLockTimeout(
            f"waited {wait_s:g} s for the cache lock {self.path / name}, held by {lock_holder(fd)} of yours "
            "using the same file; let it finish (or stop it) and try again"
        )


def flock_until(fd: int, end: float) -> bool:
    """Take an exclusive ``flock`` on ``fd``, trying until ``time.monotonic()`` reaches ``end``;
    False when it stayed held (a blocking flock has no timeout: polling gives one)."""
    import fcntl

    pause = 0.02
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def lock_holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file, for a message: "process 123" (Linux), else "another process"."""
    holder = _flock_holder(os.fstat(fd))
    return f"process {holder}" if holder else "another process"


def _flock_holder(info: os.stat_result) -> int | None:
    """The pid holding a flock on the file ``info`` describes, from /proc/locks (Linux), or None."""
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


def cache_unusable(path: Path, exc: OSError) -> InputError:
    """The one line for a cache directory that cannot be made or written."""
    return InputError(f"cache-dir {path} is not a writable directory ({exc.strerror or exc}); {HINT}")


def open_required(path: Path) -> CacheDir:
    """The cache directory for what must be kept (verified wheels, their locks): made if absent and
    checked; one line (``cache_unusable``, ``UntrustedCacheError``) when it cannot be used."""
    try:
        root = CacheDir.open(path, create=True)
    except OSError as exc:
        raise cache_unusable(path, exc) from None
    assert root is not None  # create=True makes it or raises
    return root


def open_optional(
    path: Path | None, name: str | None = None, *, create: bool, untrusted: Literal["skip", "raise"] = "skip"
) -> CacheDir | None:
    """The cache directory (or its subdirectory ``name``) for a cache that is only a shortcut:
    None where it is absent (and not ``create``d) or cannot be made. An untrusted directory is
    skipped too, unless ``untrusted="raise"``: a shortcut that steers the install (the plan)
    says so, since going on without it would hide another user's attempt."""
    if path is None:
        return None
    try:
        root = CacheDir.open(path, create=create)
        if root is None or name is None:
            return root
        with root:
            return root.child(name, create=create)
    except OSError:
        return None
    except UntrustedCacheError:
        if untrusted == "raise":
            raise
        return None
