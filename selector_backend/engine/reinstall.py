"""Where an installed build came from, and the commands that repair it, as printed.

The backend writes an install record into the wheel it hands pip
(``{dist-info}/hvd_selector_origin.json``: the variant index it read and which
setting named it, prebuilt or source, and why), so an installed copy knows
its index: ``doctor``, the import guard and the backend print commands that
work as printed (the right interpreter's installer, the index, the version),
and ``resolve`` on an installed copy ranks that index by default.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

DIST = "hvd-selector"
ORIGIN_FILE = "hvd_selector_origin.json"
#: which source named the index in an install that took it from the sdist (embedded by build_sdist)
FROM_SDIST = "pyproject.toml [tool.hvd-selector]"


class InstallOrigin(NamedTuple):
    """What the backend knew when it made this build: the index it read and why it chose what it did."""

    index_urls: tuple[str, ...] = ()
    index_from: str | None = None  # the setting's source: FROM_SDIST, "-C index-url", a variable, a config file
    plan: str = ""  # "prebuilt" or "source"
    reason: str = ""

    def to_text(self) -> str:
        import json

        data = {"index_urls": list(self.index_urls), "index_from": self.index_from, "plan": self.plan}
        return json.dumps({**data, "reason": self.reason}, indent=1) + "\n"

    @classmethod
    def from_text(cls, text: str) -> "InstallOrigin | None":
        """The record, or None when it does not read as one (an older or damaged install)."""
        import json

        try:
            data = json.loads(text)
            urls = data["index_urls"]
            if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
                return None
            index_from = data.get("index_from")
            return cls(
                tuple(urls),
                index_from if isinstance(index_from, str) else None,
                str(data.get("plan", "")),
                str(data.get("reason", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None


class Installed(NamedTuple):
    """The installed distribution as its ``.dist-info`` tells it."""

    version: str
    installer: str  # dist-info INSTALLER: "pip", "uv", ...
    origin: InstallOrigin | None
    #: the Spack install prefix this copy lives in (``<prefix>/.spack/spec.json`` beside its
    #: ``lib/pythonX.Y/site-packages``): repaired with ``spack install``, never pip
    spack_prefix: str | None = None
    #: the extras its metadata provides (Provides-Extra): a fix line offers only these
    extras: tuple[str, ...] = ()


def installed(package_dir: Path | None = None, dist: str = DIST) -> Installed | None:
    """The distribution ``dist`` whose package is ``package_dir`` (default: the hvd-selector distribution this
    ``selector_backend`` was installed with); None in a source checkout.

    Its ``.dist-info`` sits beside the package in site-packages (no metadata
    search: a plain ``resolve`` asks this on every start).
    """
    package = package_dir or Path(__file__).resolve().parents[1]
    site = package.parent
    found = sorted(site.glob(f"{dist_info_stem(dist)}-*.dist-info"))
    if len(found) != 1 or not (package / "__init__.py").is_file():
        return None

    def read(name: str) -> str | None:
        try:
            return (found[0] / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    origin = read(ORIGIN_FILE)
    prefix = site.parents[2] if len(site.parents) > 2 else site  # <prefix>/lib/pythonX.Y/site-packages
    metadata = (read("METADATA") or "").splitlines()
    extras = tuple(line.partition(":")[2].strip() for line in metadata if line.startswith("Provides-Extra:"))
    return Installed(
        found[0].name.removeprefix(dist_info_stem(dist) + "-").removesuffix(".dist-info"),
        (read("INSTALLER") or "pip").strip() or "pip",
        InstallOrigin.from_text(origin) if origin else None,
        str(prefix) if (prefix / ".spack" / "spec.json").is_file() else None,
        extras,
    )


def dist_info_stem(dist: str) -> str:
    """How a distribution's name starts its ``.dist-info`` directory (the wheel spec's escaping)."""
    import re

    return re.sub(r"[-_.]+", "_", dist).lower()


def _join(words: list[str]) -> str:
    import shlex  # only when a command is printed: not on a plain resolve's start

    return shlex.join(words)


def _requirement(installed: Installed | None, extra: str | None, dist: str) -> str:
    name = f"{dist}[{extra}]" if extra else dist
    return f"{name}=={installed.version}" if installed is not None else name


def _installer(installed: Installed | None, python: str) -> list[str]:
    if installed is not None and installed.installer == "uv":
        return ["uv", "pip", "install", "--python", python]
    return [python, "-m", "pip", "install"]


def reinstall_command(installed: Installed | None, python: str, settings: Sequence[str] = (), dist: str = DIST) -> str:
    """The command that rebuilds the installed version for this machine, its dependencies left as they are.

    pip keys its wheel cache by the sdist alone, so the cache is bypassed; the
    index comes from the install record, and ``-C index-url`` is repeated when
    that is how the install was told it. ``settings`` are extra ``KEY=VALUE``s; ``dist`` is the
    distribution (hvd-selector, or the project's own).
    """
    cmd = _installer(installed, python)
    uv = cmd[0] == "uv"
    cmd += ["--reinstall-package", dist, "--no-cache"] if uv else ["--force-reinstall", "--no-deps", "--no-cache-dir"]
    origin = installed.origin if installed is not None else None
    if origin is not None and origin.index_urls:
        # as install/fetch.normalize_location made them (backend._record_origin); a record of an earlier
        # release may hold a directory path, which pip and uv take as a local index as well
        urls = list(origin.index_urls)
        for url in urls:
            cmd += ["--extra-index-url", url]
        if origin.index_from == "-C index-url":
            cmd += ["-C", "index-url=" + " ".join(urls)]
    for item in settings:
        cmd += ["-C", item]
    return _join([*cmd, _requirement(installed, None, dist)])


def extra_command(installed: Installed | None, python: str, extra: str, dist: str = DIST) -> str:
    """The command that adds an extra's dependencies (an NCCL wheel) to the installed version of ``dist``."""
    return _join([*_installer(installed, python), _requirement(installed, extra, dist)])


def uninstall_command(installed: Installed | None, python: str, dist: str) -> str:
    if installed is not None and installed.installer == "uv":
        return _join(["uv", "pip", "uninstall", "--python", python, dist])
    return _join([python, "-m", "pip", "uninstall", "-y", dist])


def recorded_settings(installed: Installed | None) -> dict[str, Any]:
    """The settings an installed copy takes as its defaults: the index it was installed from."""
    if installed is None or installed.origin is None:
        return {}
    return {"index-url": list(installed.origin.index_urls)} if installed.origin.index_urls else {}
