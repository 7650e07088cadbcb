"""Which wheel tags a HostProfile accepts, best first (the manylinux rules).

Built from the profile, not from the running interpreter, so a Docker build
or a ``--host-profile`` of another machine gets that machine's answer.
The tags are written here, in packaging.tags' order (PEP 425, PEP 384's abi3),
rather than taken from ``packaging.tags``: importing that module (logging,
sysconfig, the ELF readers) cost a cold ``resolve --index-url`` ~40 M instructions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.wheelname import expand_tag

_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def platform_tags(host: HostProfile) -> list[str]:
    arch = host.machine or "x86_64"
    if host.platform == "linux":
        tags: list[str] = []
        libc = (host.libc or "").split()
        if len(libc) == 2 and libc[0] == "glibc":
            major, minor = (int(x) for x in libc[1].split(".")[:2])
            for m in range(minor, 4, -1):
                tags.append(f"manylinux_{major}_{m}_{arch}")
                if (major, m) in _LEGACY:
                    tags.append(f"{_LEGACY[(major, m)]}_{arch}")
        elif len(libc) == 2 and libc[0] == "musl":
            major, minor = (int(x) for x in libc[1].split(".")[:2])
            tags += [f"musllinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)]
        return [*tags, f"linux_{arch}"]
    if host.platform == "darwin":
        return [
            f"macosx_{v}_0_{a}"
            for v in range(15, 10, -1)
            for a in (arch if arch != "aarch64" else "arm64", "universal2")
        ]
    return []


def _py_versions(major: int, minor: int) -> Iterator[str]:
    """Pure-Python interpreter tags, best first: py3x, py3, then each older py3y down to py30."""
    yield f"py{major}{minor}"
    yield f"py{major}"
    yield from (f"py{major}{older}" for older in range(minor - 1, -1, -1))


def _cpython_tags(abi: str, major: int, minor: int, platforms: Sequence[str]) -> Iterator[str]:
    """CPython extension tags: its own ABI, then abi3 (from 3.2 on), then none; then older abi3 builds."""
    interpreter = f"cp{major}{minor}"
    stable = (major, minor) >= (3, 2)  # PEP 384 arrived in 3.2
    yield from (f"{interpreter}-{abi}-{p}" for p in platforms)
    if stable:
        yield from (f"{interpreter}-abi3-{p}" for p in platforms)
    yield from (f"{interpreter}-none-{p}" for p in platforms)
    if stable:  # an abi3 wheel built for 3.y loads on every later 3.x
        for older in range(minor - 1, 1, -1):
            yield from (f"cp{major}{older}-abi3-{p}" for p in platforms)


def _compatible_tags(interpreter: str, major: int, minor: int, platforms: Sequence[str]) -> Iterator[str]:
    """Tags with no ABI: py*-none-<platform>, then <interpreter>-none-any, then py*-none-any."""
    for py in _py_versions(major, minor):
        yield from (f"{py}-none-{p}" for p in platforms)
    yield f"{interpreter}-none-any"
    yield from (f"{py}-none-any" for py in _py_versions(major, minor))


def python_tags(python: str, platforms: Sequence[str]) -> Iterator[str]:
    """Tags an interpreter (``cp311``, ``pp310``) accepts on these platforms, best first.

    The same tags, in the same order, as ``packaging.tags.cpython_tags((3, 11),
    ["cp311"], platforms)`` then ``compatible_tags((3, 11), "cp311", platforms)``
    (only the latter for a non-CPython interpreter), except that no platforms
    means none, not the running machine's.
    """
    impl, digits = python[:2], python[2:]
    major, minor = int(digits[0]), int(digits[1:])
    if impl == "cp":
        yield from _cpython_tags(python, major, minor, platforms)
    yield from _compatible_tags(python, major, minor, platforms)


def host_tags(host: HostProfile) -> Iterator[str]:
    """Supported python-abi-platform tags in priority order."""
    if host.python:
        yield from python_tags(host.python, platform_tags(host))


def ranked_host_tags(host: HostProfile) -> dict[str, int]:
    """tag -> priority (lower is better) of every tag the host accepts; a tag listed twice keeps its first place."""
    ranked: dict[str, int] = {}
    for number, tag in enumerate(host_tags(host)):
        ranked.setdefault(tag, number)
    return ranked


def check_wheel_tags(tag: str, host: HostProfile, ranked_tags: dict[str, int]) -> tuple[Finding, int]:
    """(finding, tag priority) for a wheel's ``python-abi-platform`` tag (a compressed set
    allowed) on the host, ``ranked_tags`` from ``ranked_host_tags``; lower priority is better."""
    best = min((ranked_tags[t] for t in expand_tag(*tag.split("-")) if t in ranked_tags), default=None)
    if best is None:
        missing = [f for f in ("platform", "python", "libc", "machine") if getattr(host, f) is None]
        if host.platform != "linux" and "libc" in missing:
            missing.remove("libc")
        lacks = f"; the host profile lacks {', '.join(missing)}" if missing else ""
        return Finding(
            False,
            f"wheel tag {tag} is not supported by host ({host.platform}, {host.python}, {host.libc}, "
            f"{host.machine}){lacks}",
        ), 10**9
    return Finding(True, f"wheel tag {tag} is supported by the host"), best
