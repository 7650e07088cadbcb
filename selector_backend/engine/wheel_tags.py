"""Which wheel tags a HostProfile accepts, best first (the manylinux rules).

Built from the profile, not from the running interpreter, so a Docker build
or a ``--host-profile`` of another machine gets that machine's answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.wheelname import WheelName

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


def host_tags(host: HostProfile) -> Iterator[str]:
    """Supported python-abi-platform tags in priority order."""
    from packaging import tags

    if not host.python:
        return
    impl, digits = host.python[:2], host.python[2:]
    version = (int(digits[0]), int(digits[1:]))
    platforms = platform_tags(host)
    if impl == "cp":
        yield from (str(t) for t in tags.cpython_tags(version, [host.python], platforms))
    yield from (str(t) for t in tags.compatible_tags(version, host.python, platforms))


def check_wheel_tags(wheel: WheelName, host: HostProfile, ranked_tags: dict[str, int]) -> tuple[Finding, int]:
    """(finding, tag priority) for a wheel on the host; lower priority number is better."""
    best = min((ranked_tags[t] for t in wheel.tags() if t in ranked_tags), default=None)
    tag = f"{wheel.python}-{wheel.abi}-{wheel.platform}"
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
