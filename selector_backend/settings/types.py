"""The field types of the settings model: each one parses and validates its raw value.

A field is annotated ``Annotated[T, parser]``; the source chain finds the
parser in the annotation and calls ``parser(raw, name, where)``. ``raw`` is
what a source holds (TOML value, environment text, ``-C`` text); ``name`` is
the setting's name in messages; ``where`` says which source gave it
(``-C offline``, ``HVD_SELECTOR_OFFLINE``, ``config.toml:3``). A bad value
is one ``InputError`` line naming both.

Host-fact types return what replaces the detected fact on the HostProfile,
so applying an override is a plain assignment (``host_facts.apply``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from selector_backend.engine.host import (
    MPI_IMPLEMENTATIONS,
    GpuInfo,
    HostProfile,
    LibraryInfo,
    parse_compute_capability,
    parse_version_text,
)
from selector_backend.errors import InputError, unknown_choice
from selector_backend.files.private_cache import default_cache_dir

Parser = Callable[[Any, str, str], Any]


def plain(parse: Callable[[Any, str], Any]) -> Parser:
    """A parser whose message names the setting; the source is put in front of it."""

    def parser(value: Any, name: str, where: str) -> Any:
        try:
            return parse(value, name)
        except InputError as exc:
            raise InputError(f"{where}: {exc}" if where else str(exc)) from None

    parser.__doc__ = parse.__doc__
    return parser


# ------------------------------------------------------------------ value syntax
def text(value: Any, name: str) -> str:
    """A non-empty string, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string")
    return value.strip()


def flag(value: Any, name: str) -> bool:
    """1/0, true/false, yes/no, on/off (or a TOML boolean)."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off", ""):
        return False
    raise InputError(f"{name}={value!r} is not a boolean; use 1/0, true/false, yes/no")


def words(value: Any, name: str) -> tuple[str, ...]:
    """A TOML list of strings, or one string split at commas and blanks."""
    if isinstance(value, str):
        return tuple(v for v in value.replace(",", " ").split() if v)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InputError(f"{name} must be a string or a list of strings")


def seconds(value: Any, name: str) -> float:
    """A number of seconds above 0, at most an hour (nan and inf are refused)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}={value!r} is not a number of seconds") from None
    if not 0 < number <= 3600:
        raise InputError(f"{name}={value!r} must be between 0 and 3600 seconds")
    return number


def retries(value: Any, name: str) -> int:
    """A whole number from 0 to 20."""
    try:
        count = int(str(value))
    except ValueError:
        raise InputError(f"{name}={value!r} is not a whole number") from None
    if not 0 <= count <= 20:
        raise InputError(f"{name}={value!r} must be between 0 and 20")
    return count


def origins(value: Any, name: str) -> tuple[str, ...]:
    """``https://host[:port]`` origins (http on loopback only)."""
    from selector_backend.install.fetch import parse_origins  # urllib: only when the setting is given

    return parse_origins(words(value, name), name)


def path(value: Any, name: str) -> Path:
    """A file or directory; ``~`` is expanded."""
    return Path(os.path.expanduser(text(value, name)))


def choice(*choices: str) -> Parser:
    def parse(value: Any, name: str) -> str:
        word = text(value, name)
        if word not in choices:
            raise unknown_choice(f"value for {name}", word, choices)
        return word

    return plain(parse)


# ------------------------------------------------------------------ host facts
def _absent(word: str) -> bool:
    return word.strip().lower() in ("none", "absent", "")


def cpu_target(value: Any, name: str, where: str) -> str:
    """An archspec microarchitecture name."""
    from selector_backend.engine import targets

    word = plain(text)(value, name, where)
    try:
        targets.microarchitecture(word)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return word


def profile_text(value: Any, name: str, where: str) -> str:
    """os, libc or python, checked by the HostProfile JSON rules for that field."""
    word = plain(text)(value, name, where)
    return str(getattr(HostProfile.from_json({name: word}, source=where), name))


def gpus(value: Any, name: str, where: str) -> tuple[GpuInfo, ...]:
    """Compute capabilities (8.0, 80, sm_80), or none."""
    items = plain(words)(value, name, where)
    if len(items) == 1 and _absent(items[0]):
        return ()
    return tuple(GpuInfo("nvidia", f"GPU from {where}", parse_compute_capability(v, where)) for v in items)


def cuda_driver(value: Any, name: str, where: str) -> str | None:
    """A CUDA version, or none."""
    word = plain(text)(value, name, where)
    return None if _absent(word) else parse_version_text(word, "cuda driver", where)


def mpi(value: Any, name: str, where: str) -> LibraryInfo | None:
    """'IMPLEMENTATION [VERSION]', or none."""
    word = plain(text)(value, name, where)
    if _absent(word):
        return None
    impl, _, version = word.partition(" ")
    if impl not in MPI_IMPLEMENTATIONS:
        raise unknown_choice(f"MPI implementation in {where}", impl, MPI_IMPLEMENTATIONS)
    return LibraryInfo(impl, parse_version_text(version, "MPI version", where) if version else None, where)


def nccl(value: Any, name: str, where: str) -> LibraryInfo | None:
    """A NCCL version, or none."""
    word = plain(text)(value, name, where)
    return None if _absent(word) else LibraryInfo("nccl", parse_version_text(word, "NCCL version", where), where)


def gloo(value: Any, name: str, where: str) -> LibraryInfo | None:
    """A Gloo version, 'present', or none."""
    word = plain(text)(value, name, where)
    if _absent(word):
        return None
    return LibraryInfo("gloo", None if word == "present" else parse_version_text(word, "Gloo version", where), where)


# ------------------------------------------------------------------ the types the model uses
class NamedByEnv:
    """Marks a knob whose messages name its variable when the value came from it: detection
    also reads it without Settings (``settings.env_setting``), where the variable is its only name."""


class Computed:
    """A default computed from the environment when settings are loaded; ``text`` is its docs form."""

    def __init__(self, compute: Callable[[Any], Any], text: str) -> None:
        self.compute = compute
        self.text = text


BuildPolicyName = Literal["prefer-prebuilt", "always-build", "never-build"]
BUILD_POLICIES: tuple[str, ...] = get_args(BuildPolicyName)

Text = Annotated[str, plain(text)]
OptionalText = Annotated[str | None, plain(text)]
Flag = Annotated[bool, plain(flag)]
Urls = Annotated[tuple[str, ...], plain(words)]
Origins = Annotated[tuple[str, ...], plain(origins)]
Seconds = Annotated[float, plain(seconds)]
Retries = Annotated[int, plain(retries)]
OptionalPath = Annotated[Path | None, plain(path)]
CacheDir = Annotated[Path, plain(path), Computed(default_cache_dir, "$XDG_CACHE_HOME/hvd-selector")]
BuildPolicy = Annotated[BuildPolicyName, choice(*BUILD_POLICIES)]
DetectSeconds = Annotated[float, plain(seconds), NamedByEnv()]

Target = Annotated[str | None, cpu_target]
ProfileText = Annotated[str | None, profile_text]
Gpus = Annotated[tuple[GpuInfo, ...] | None, gpus]
CudaDriver = Annotated[str | None, cuda_driver]
Mpi = Annotated[LibraryInfo | None, mpi]
Nccl = Annotated[LibraryInfo | None, nccl]
Gloo = Annotated[LibraryInfo | None, gloo]
