"""Platform facts: os (Spack's naming), machine, libc, Python tag."""

from __future__ import annotations

import os
import sys

_MACOS_NAMES = {
    "10.15": "catalina",
    "11": "bigsur",
    "12": "monterey",
    "13": "ventura",
    "14": "sonoma",
    "15": "sequoia",
    "26": "tahoe",
}


def platform_name() -> str:
    return {"linux": "linux", "darwin": "darwin", "win32": "windows"}.get(sys.platform, sys.platform)


def machine() -> str:
    """This machine's name as an archspec family (macOS arm64 and Windows AMD64 normalised)."""
    import platform

    from selector_backend.engine.host import normalise_machine

    return normalise_machine(platform.machine())


def python_tag() -> str:
    prefix = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, "py")
    return f"{prefix}{sys.version_info[0]}{sys.version_info[1]}"


def libc() -> str | None:
    if sys.platform != "linux":
        return None
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36", fast: no file reads
    except (ValueError, OSError):
        text = None
    if text:
        return text
    import platform

    name, version = platform.libc_ver()
    return f"{name} {version}" if name and version else None


def spack_os_name(distro_id: str, version_id: str) -> str:
    """Spack's os naming: ubuntu keeps major.minor, others the major version."""
    distro = distro_id.lower().replace(" ", "")
    if distro == "ubuntu":
        return f"ubuntu{'.'.join(version_id.split('.')[:2])}"
    major = version_id.split(".")[0]
    aliases = {"opensuse-leap": "opensuse", "sles": "sles", "amzn": "amzn"}
    return f"{aliases.get(distro, distro)}{major}"


def os_name() -> str | None:
    if sys.platform == "darwin":
        import platform

        release = platform.mac_ver()[0]
        major = release.split(".")[0]
        key = ".".join(release.split(".")[:2]) if major == "10" else major
        return _MACOS_NAMES.get(key, f"macos{major}")
    if sys.platform != "linux":
        return None
    fields: dict[str, str] = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        fields[key] = value.strip().strip('"')
            break
        except OSError:
            continue
    if "ID" not in fields:
        return None
    return spack_os_name(fields["ID"], fields.get("VERSION_ID", ""))
