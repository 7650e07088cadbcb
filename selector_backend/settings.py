"""One typed schema for every user setting, fed from every source.

Each ``Option`` is declared once; its environment variable, config-file key,
``-C`` key, validation and the docs table all derive from it. Precedence,
highest first: ``-C``/command-line > ``HVD_SELECTOR_*`` environment > config
file (``$HVD_SELECTOR_CONFIG``, else user then system file) >
``[tool.hvd-selector]`` in pyproject.toml > built-in default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from selector_backend.engine.host import (
    MPI_IMPLEMENTATIONS,
    CpuInfo,
    GpuInfo,
    HostProfile,
    LibraryInfo,
    parse_compute_capability,
    parse_version_text,
)
from selector_backend.errors import InputError, did_you_mean, unknown_choice
from selector_backend.files.private_cache import default_cache_dir

ENV_PREFIX = "HVD_SELECTOR_"
BUILD_POLICIES = ("prefer-prebuilt", "always-build", "never-build")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string")
    return value.strip()


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InputError(f"{name}={value!r} is not a boolean; use 1/0, true/false, yes/no")


def _list(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v for v in value.replace(",", " ").split() if v]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise InputError(f"{name} must be a string or a list of strings")
    return tuple(items)


def _choice(choices: tuple[str, ...]) -> Callable[[Any, str], str]:
    def parse(value: Any, name: str) -> str:
        text = _text(value, name)
        if text not in choices:
            raise unknown_choice(f"value for {name}", text, choices)
        return text

    return parse


def _seconds(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}={value!r} is not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise InputError(f"{name}={value!r} must be between 0 and 3600 seconds")
    return seconds


def _count(value: Any, name: str) -> int:
    try:
        count = int(str(value))
    except ValueError:
        raise InputError(f"{name}={value!r} is not a whole number") from None
    if not 0 <= count <= 20:
        raise InputError(f"{name}={value!r} must be between 0 and 20")
    return count


def _origins(value: Any, name: str) -> tuple[str, ...]:
    from selector_backend.install.fetch import parse_origins

    return parse_origins(_list(value, name), name)


def _path(value: Any, name: str) -> Path:
    return Path(os.path.expanduser(_text(value, name)))


class Option(NamedTuple):
    """One setting: its name everywhere, its parser, its default and its doc line."""

    name: str
    parse: Callable[[Any, str], Any]
    default: Any
    help: str
    host_fact: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("selector", _text, "auto", "selector policy: auto, cpu, gpu-nvidia, plus pins like tensor_ops=mpi"),
    Option(
        "index-url",
        _list,
        (),
        "variant index URL(s): https://, http:// on loopback only, file:// or a directory",
    ),
    Option(
        "build-policy",
        _choice(BUILD_POLICIES),
        "prefer-prebuilt",
        "prefer-prebuilt, always-build (source build always) or never-build (fail instead of building)",
    ),
    Option("cache-dir", _path, None, "download cache (default $XDG_CACHE_HOME/hvd-selector)"),
    Option(
        "index-timeout",
        _seconds,
        30.0,
        "seconds one index page request may take in all (connect to last byte) before it is retried",
    ),
    Option(
        "download-timeout",
        _seconds,
        600.0,
        "seconds one wheel download may take in all before it is retried (each wait is bounded by index-timeout)",
    ),
    Option(
        "index-file-origins",
        _origins,
        (),
        "other origins (https://host[:port]) an index may link its files to; by default only the index's own",
    ),
    Option("index-retries", _count, 3, "retries of a failed index request (5xx, timeout, reset, short body)"),
    Option("offline", _bool, False, "use only the cache and file/directory indexes; no network"),
    Option("host-profile", _path, None, "read the HostProfile JSON from this file instead of detecting"),
    Option("variant", _text, None, "build exactly this variant from source ('target=x86_64_v3 tensor_ops=gloo')"),
    # host facts: each replaces one detected fact
    Option(
        "target",
        _text,
        None,
        "host CPU microarchitecture (archspec name), e.g. x86_64_v3 or zen3; "
        "steers selection only (the import guard always checks the real CPU)",
        True,
    ),
    Option("os", _text, None, "host os in Spack naming, e.g. ubuntu24.04", True),
    Option("libc", _text, None, "host libc, e.g. 'glibc 2.39'", True),
    Option("python", _text, None, "interpreter tag, e.g. cp311", True),
    Option("gpus", _list, None, "NVIDIA GPU compute capabilities, e.g. 8.0,8.0 or none", True),
    Option("cuda-driver", _text, None, "highest CUDA version the driver supports, e.g. 12.4, or none", True),
    Option("mpi", _text, None, "MPI runtime: 'mpich 4.2.0', 'openmpi 5.0.3' or none", True),
    Option("nccl", _text, None, "NCCL version, e.g. 2.21.5, or none", True),
    Option("gloo", _text, None, "system Gloo: a version, 'present' or none", True),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}

# HVD_SELECTOR_* variables that are not settings: accepted (not "unknown") and documented from here.
OTHER_ENV: dict[str, str] = {
    ENV_PREFIX + "CONFIG": "read this config file instead of the system and user ones",
    ENV_PREFIX + "DEBUG": "show a traceback for internal errors instead of one line",
    ENV_PREFIX + "QUIET": "1: the backend's notices (choice, fallbacks) stay off the terminal during pip install",
    ENV_PREFIX + "DETECT_TIMEOUT": "seconds one detector (a tool, NVML) may take before it is skipped (default 5)",
    ENV_PREFIX + "NVML_REPLAY": "replay recorded NVML answers from this JSON file instead of asking the driver",
    ENV_PREFIX + "RUN_GPU": "test suite: also run the tests marked gpu",
    ENV_PREFIX + "TRACE": "append one JSON line per backend decision (plan computed or reused) to this file",
    # set by `hvd-selector run` for each rank it starts; a rank may itself run hvd-selector
    ENV_PREFIX + "TIMEOUT": "hvd-selector run: seconds a rank waits for its peers (default 60)",
    ENV_PREFIX + "RANK": "set by hvd-selector run: this process's rank",
    ENV_PREFIX + "SIZE": "set by hvd-selector run: number of ranks",
    ENV_PREFIX + "LOCAL_RANK": "set by hvd-selector run: rank on this host",
    ENV_PREFIX + "LOCAL_SIZE": "set by hvd-selector run: ranks on this host",
    ENV_PREFIX + "RENDEZVOUS": "set by hvd-selector run: the rendezvous address",
    ENV_PREFIX + "SECRET": "set by hvd-selector run: the rendezvous authentication key",
    ENV_PREFIX + "HOSTNAME": "runtime: the address this rank's Gloo pairs listen on (default: 127.0.0.1 when the "
    "rendezvous is on loopback, else the local address that reaches the rendezvous)",
    ENV_PREFIX + "HOST": "set by hvd-selector run: the host name (as given to -H) this rank runs on",
    ENV_PREFIX + "IFACE": "set by hvd-selector run --network-interface: the interface whose address a rank advertises",
    ENV_PREFIX + "BIND": "runtime: the address rank 0's rendezvous store binds (default: the rendezvous address only)",
    ENV_PREFIX + "RENDEZVOUS_ADDR": "runtime (mpirun, Slurm, torchrun jobs): the host rank 0 serves the store on",
    ENV_PREFIX + "RENDEZVOUS_PORT": "runtime (mpirun, Slurm, torchrun jobs): the port rank 0 serves the store on",
    ENV_PREFIX + "SECRET_FILE": "runtime: a file holding the job secret (jobs not started by hvd-selector run)",
    ENV_PREFIX + "SHM": "runtime: 0 turns the shared-memory transport between ranks on one host off (default 1)",
    ENV_PREFIX + "OBJECT_PICKLE": "hvd_selector.torch: 1 on every rank lets broadcast_object/allgather_object use "
    "full pickle (default: torch.load with weights_only=True)",
    ENV_PREFIX + "HOST_ID": "runtime: ranks with the same value count as one host (default: host name + boot id)",
}


class Settings(NamedTuple):
    values: Mapping[str, Any] = MappingProxyType({})
    origins: Mapping[str, str] = MappingProxyType({})

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        return OPTIONS_BY_NAME[name].default

    @property
    def selector(self) -> str:
        return str(self.get("selector"))

    @property
    def cache_dir(self) -> Path:
        return self.get("cache-dir") or default_cache_dir()

    def fetch_options(self) -> dict[str, Any]:
        """Keyword arguments for selector_backend.install.fetch calls."""
        return {
            "offline": bool(self.get("offline")),
            "timeout": float(self.get("index-timeout")),
            "retries": int(self.get("index-retries")),
        }

    def host_overrides(self) -> dict[str, Any]:
        return {o.name: self.values[o.name] for o in OPTIONS if o.host_fact and o.name in self.values}


# ------------------------------------------------------------------ sources
def config_file_candidates(env: Mapping[str, str] | None = None) -> list[Path]:
    """Config files in increasing precedence (system, then user), or the explicit one."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_PREFIX + "CONFIG")
    if explicit:
        return [Path(os.path.expanduser(explicit))]
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return [Path("/etc/hvd-selector/config.toml"), Path(xdg) / "hvd-selector" / "config.toml"]


def _from_mapping(
    raw: Mapping[str, Any],
    source: str,
    out: dict[str, Any],
    origins: dict[str, str],
    locate: Callable[[str], str] | None = None,
) -> None:
    for key, value in raw.items():
        if key == "host" and isinstance(value, dict):
            for hkey, hvalue in value.items():
                option = OPTIONS_BY_NAME.get(hkey)
                if option is None or not option.host_fact:
                    facts = [o.name for o in OPTIONS if o.host_fact]
                    where = locate(hkey) if locate else source
                    raise InputError(f"{where}: unknown host fact {hkey!r}{did_you_mean(hkey, facts)}")
                _set(option, hvalue, locate(hkey) if locate else source, out, origins)
            continue
        option = OPTIONS_BY_NAME.get(key)
        if option is None or option.host_fact:
            names = [o.name for o in OPTIONS if not o.host_fact] + ["host"]
            where = locate(key) if locate else source
            raise InputError(f"{where}: unknown setting {key!r}{did_you_mean(key, names)}")
        _set(option, value, locate(key) if locate else source, out, origins)


def _set(option: Option, value: Any, source: str, out: dict[str, Any], origins: dict[str, str]) -> None:
    try:
        out[option.name] = option.parse(value, option.name)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    origins[option.name] = source


def load_settings(
    config_settings: Mapping[str, Any] | None = None,
    *,
    pyproject: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge every source in precedence order into one Settings value."""
    from selector_backend.files.tomlfile import load_toml

    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if pyproject:
        _from_mapping(pyproject, "pyproject.toml [tool.hvd-selector]", values, origins)
    for path in config_file_candidates(env):
        if path.is_file():
            doc = load_toml(path)
            _from_mapping(doc.data, str(path), values, origins, doc.locate)
        elif env.get(ENV_PREFIX + "CONFIG"):
            raise InputError(f"{ENV_PREFIX}CONFIG={path}: no such file")
    known_env = {o.env: o for o in OPTIONS}
    extra_env = set(OTHER_ENV)
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in extra_env:
            continue
        option = known_env.get(name)
        if option is None:
            raise InputError(f"unknown environment variable {name}{did_you_mean(name, [*known_env, *extra_env])}")
        _set(option, value, name, values, origins)
    if ENV_PREFIX + "DETECT_TIMEOUT" in env:  # read by detection itself; checked here so it is never ignored
        _seconds(env[ENV_PREFIX + "DETECT_TIMEOUT"], ENV_PREFIX + "DETECT_TIMEOUT")
    if "HVD_SELECTOR" in env and ENV_PREFIX + "SELECTOR" not in env:
        _set(OPTIONS_BY_NAME["selector"], env["HVD_SELECTOR"], "HVD_SELECTOR", values, origins)
    for key, value in (config_settings or {}).items():
        option = OPTIONS_BY_NAME.get(key)
        if option is None:
            raise InputError(
                f"unknown config setting -C {key}{did_you_mean(key, OPTIONS_BY_NAME)}; "
                f"valid: {', '.join(OPTIONS_BY_NAME)}"
            )
        _set(option, value, f"-C {key}", values, origins)
    return Settings(values, origins)


# ------------------------------------------------------------------ host facts
def _none(text: str) -> bool:
    return text.strip().lower() in ("none", "absent", "")


def apply_host_overrides(profile: HostProfile, settings: Settings) -> HostProfile:
    """Replace detected facts with the user's; each replacement leaves a note."""
    facts = settings.host_overrides()
    if not facts:
        return profile
    changes: dict[str, Any] = {}
    libraries = dict(profile.libraries)
    for name, value in facts.items():
        source = settings.origins.get(name, name)
        if name == "target":
            from selector_backend.engine import targets

            try:
                targets.microarchitecture(value)
            except InputError as exc:
                raise InputError(f"{source}: {exc}") from None
            changes["cpu"] = CpuInfo.from_microarch(value)
            changes["machine"] = changes["cpu"].family
        elif name in ("os", "libc", "python"):
            checked = HostProfile.from_json({name: value}, source=source)
            changes[name] = getattr(checked, name)
        elif name == "gpus":
            if len(value) == 1 and _none(value[0]):
                changes["gpus"] = ()
            else:
                changes["gpus"] = tuple(
                    GpuInfo("nvidia", f"GPU from {source}", parse_compute_capability(v, source)) for v in value
                )
        elif name == "cuda-driver":
            changes["cuda_driver"] = None if _none(value) else parse_version_text(value, "cuda driver", source)
        elif name == "mpi":
            if _none(value):
                libraries["mpi"] = None
            else:
                impl, _, version = value.partition(" ")
                if impl not in MPI_IMPLEMENTATIONS:
                    raise unknown_choice(f"MPI implementation in {source}", impl, MPI_IMPLEMENTATIONS)
                libraries["mpi"] = LibraryInfo(
                    impl, parse_version_text(version, "MPI version", source) if version else None, source
                )
        elif name == "nccl":
            libraries["nccl"] = (
                None if _none(value) else LibraryInfo("nccl", parse_version_text(value, "NCCL version", source), source)
            )
        elif name == "gloo":
            libraries["gloo"] = (
                None
                if _none(value)
                else LibraryInfo(
                    "gloo",
                    None if value == "present" else parse_version_text(value, "Gloo version", source),
                    source,
                )
            )
        profile = profile.with_note(
            f"override: {name}={','.join(value) if isinstance(value, tuple) else value} (from {source})"
        )
    return profile._replace(libraries=libraries, **changes)


def host_profile_for(settings: Settings) -> HostProfile:
    """The HostProfile every command resolves against: file or detection, then overrides."""
    from selector_backend.engine.host import load_host_profile

    path = settings.get("host-profile")
    if path is not None:
        profile = load_host_profile(path)
    else:
        from selector_backend.detect import detect_host

        profile = detect_host()
    return apply_host_overrides(profile, settings)
