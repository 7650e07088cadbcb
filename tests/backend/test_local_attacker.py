"""Issue 27: another local user against the cache directory, its locks and what an install writes.

Each scenario runs the real backend hook (``get_requires_for_build_wheel``,
which decides and downloads) in a fresh process against a loopback index,
as the test's own user (root: the victim), while a real second local user
made for the test (the attacker) prepares the ground or holds a file. What
must hold: the install ends in time with either the wheel or one line naming
the directory, and nothing outside the cache directory is deleted or written.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .backend_helpers import REPO, clean_env
from .hostile_index import HostileIndex, hostile_index, make_wheel, run_hook, sha256
from .local_user import LocalUser, as_user, holding_as_user, second_user, shared_area, snapshot

TIMEOUT = 5.0
WITHIN = 25.0  # interpreter start-up, detection, one download; a hung install is killed at 60 s


class Install:
    def __init__(self, proc: subprocess.CompletedProcess[str], seconds: float) -> None:
        self.rc, self.stderr, self.seconds = proc.returncode, proc.stderr, seconds
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.last = lines[-1] if lines else ""

    def __repr__(self) -> str:
        return f"rc={self.rc} after {self.seconds:.1f}s\n{self.stderr[-3000:]}"

    def refused(self, *fragments: str) -> None:
        assert self.rc == 2, self
        assert "Traceback" not in self.stderr, self
        assert self.last.startswith("hvd-selector: error: cache-dir "), self
        for fragment in fragments:
            assert fragment in self.last, self


def install(index: HostileIndex, cache: Path, home: Path) -> Install:
    """One install decision + download, as pip runs it, with ``cache`` as HVD_SELECTOR_CACHE_DIR."""
    config = {
        "index-url": index.index_url,
        "build-policy": "never-build",
        "index-timeout": str(TIMEOUT),
        "index-retries": "0",
        "download-timeout": str(TIMEOUT),
    }
    env = clean_env(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        HVD_SELECTOR_CACHE_DIR=str(cache),
        PYTHONPATH=str(REPO),
    )
    return Install(*run_hook(config, env, timeout=60))


@pytest.fixture(scope="module")
def attacker() -> Iterator[LocalUser]:
    with second_user("att") as user:
        yield user


@pytest.fixture()
def area() -> Iterator[Path]:
    with shared_area() as path:
        yield path


@pytest.fixture()
def index() -> Iterator[HostileIndex]:
    with hostile_index() as server:
        yield server


def victim_home(area: Path) -> Path:
    """The victim's home, 0755 as Debian's useradd makes it, with work the attacker wants gone."""
    home = area / "victim"
    old = time.time() - 3600  # older than any cache's age limit
    for project in ("proj", "proj2", "proj3", "proj4"):
        (home / project).mkdir(parents=True)
        for name in ("config.json", "results.json", ".old.tmp", "a.marshal", f"{'0' * 32}.json", "x.lock"):
            (home / project / name).write_text(f"{project}/{name}: the victim's own\n")
            os.utime(home / project / name, (old, old))
    (home / ".cache").mkdir(mode=0o755)
    home.chmod(0o755)
    return home


def outside_cache(home: Path) -> dict[str, tuple[str, int, float]]:
    return {k: v for k, v in snapshot(home).items() if not k.startswith(".cache")}


# ------------------------------------------------------------------ 1: the lock another user held
def test_another_user_cannot_hold_the_install(attacker: LocalUser, area: Path, index: HostileIndex) -> None:
    """The cache an earlier release left (0755 directories, 0644 lock files): the attacker opens the
    wheel's lock file read-only and holds a flock on it. The install does not wait for it."""
    wheel = make_wheel()
    index.publish(wheel)
    home = victim_home(area)
    cache = home / ".cache" / "hvd-selector"
    locks = cache / "locks"
    locks.mkdir(parents=True, mode=0o755)
    cache.chmod(0o755)
    locks.chmod(0o755)
    lock = locks / f"{sha256(wheel)}.lock"
    lock.write_text("")
    lock.chmod(0o644)

    def hold() -> str:
        fd = os.open(lock, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return "holding"

    with holding_as_user(attacker, hold) as state:
        assert state == "holding"
        before = outside_cache(home)
        outcome = install(index, cache, home)
        assert outcome.rc == 0, outcome
        assert outcome.seconds < WITHIN, outcome
    assert outside_cache(home) == before
    assert list((cache / "wheels" / sha256(wheel)).glob("*.whl")), "the verified wheel is cached"
    assert locks.stat().st_mode & 0o777 == 0o700
    assert lock.stat().st_mode & 0o777 == 0o600
    assert as_user(attacker, lambda: str(os.open(lock, os.O_RDONLY))).startswith("error: PermissionError")


# ------------------------------------------------------------------ 2: the cache directory another user made
@pytest.mark.parametrize("owner", ["attacker", "victim, writable by all"])
@pytest.mark.parametrize(
    "links", [("plans", "index-pages"), ("wheels", "locks"), ("plans", "index-pages", "wheels", "locks")]
)
def test_a_cache_dir_another_user_made_first(
    attacker: LocalUser, area: Path, index: HostileIndex, owner: str, links: tuple[str, ...]
) -> None:
    """``HVD_SELECTOR_CACHE_DIR=/tmp/hvdshared`` made first by the attacker (or made writable by all),
    holding links to the victim's projects: the install stops with one line naming the directory, and
    nothing of the victim's is deleted, replaced or added."""
    index.publish(make_wheel())
    home = victim_home(area)
    shared = area / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    cache = shared / "hvdshared"
    if owner == "victim, writable by all":
        cache.mkdir()
        cache.chmod(0o777)
    targets = dict(zip(("plans", "index-pages", "wheels", "locks"), ("proj", "proj2", "proj3", "proj4"), strict=True))

    def prepare() -> str:
        if not cache.exists():
            cache.mkdir(mode=0o755)
        for name in links:
            (cache / name).symlink_to(home / targets[name])
        return "ready"

    assert as_user(attacker, prepare) == "ready"
    before = snapshot(home)
    outcome = install(index, cache, home)
    why = f"is owned by uid {attacker.uid} ({attacker.name}), not by you" if owner == "attacker" else "other users"
    outcome.refused(str(cache), why, "HVD_SELECTOR_CACHE_DIR")
    assert snapshot(home) == before


# ------------------------------------------------------------------ 3: links inside the victim's own cache
@pytest.mark.parametrize("name", ["plans", "index-pages", "wheels", "locks"])
def test_a_link_inside_the_cache_is_never_followed(area: Path, index: HostileIndex, name: str) -> None:
    """The victim's own cache with one directory replaced by a link to a project: the install either
    goes on without that part (parsed pages are only a shortcut) or stops naming it, and the project is
    untouched. Needs no second user: the link stands for one planted while the cache was writable."""
    wheel = make_wheel()
    index.publish(wheel)
    home = victim_home(area)
    cache = home / ".cache" / "hvd-selector"
    cache.mkdir(mode=0o700)
    (cache / name).symlink_to(home / "proj")
    before = outside_cache(home)
    outcome = install(index, cache, home)
    if name == "index-pages":
        assert outcome.rc == 0, outcome
        assert list((cache / "wheels" / sha256(wheel)).glob("*.whl"))
    else:
        outcome.refused(f"{cache / name} is a symbolic link", "hvd-selector cache clean")
    assert outside_cache(home) == before
    assert (cache / name).is_symlink()
