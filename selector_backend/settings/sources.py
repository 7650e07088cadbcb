"""The one source chain: where each setting's raw value comes from, in precedence order.

Highest first: ``-C``/command line > ``HVD_SELECTOR_*`` environment >
config file (``$HVD_SELECTOR_CONFIG``, else the user file over the system
file) > ``[tool.hvd-selector]`` in pyproject.toml > an installed copy's
install record (the index it came from) > the model's default.
Each source turns its own representation (TOML tables, variable names, ``-C``
keys) into ``(option, raw value, where)``; unknown names are errors with a
suggestion. The chain applies them lowest first and records where each value
came from, so the highest source wins and messages can name it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from selector_backend.errors import InputError, did_you_mean
from selector_backend.settings.model import ENV_PREFIX, OPTIONS, OPTIONS_BY_NAME, OTHER_ENV, HostFacts, Option, Settings

Raw = tuple[Option, Any, str]  # option, raw value, where it came from
RECORDED = "the install record (hvd_selector_origin.json)"


def config_file_candidates(env: Mapping[str, str] | None = None) -> list[Path]:
    """Config files in increasing precedence (system, then user), or the explicit one."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_PREFIX + "CONFIG")
    if explicit:
        return [Path(os.path.expanduser(explicit))]
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return [Path("/etc/hvd-selector/config.toml"), Path(xdg) / "hvd-selector" / "config.toml"]


def toml_source(table: Mapping[str, Any], where: str, locate: Callable[[str], str] | None = None) -> Iterator[Raw]:
    """A TOML table: settings at the top, host facts in ``[host]`` (pyproject and config files)."""

    def at(key: str) -> str:
        return locate(key) if locate else where

    for key, value in table.items():
        if key == "host" and isinstance(value, dict):
            for fact, raw in value.items():
                option = OPTIONS_BY_NAME.get(fact)
                if option is None or not option.host_fact:
                    facts = [o.name for o in OPTIONS if o.host_fact]
                    raise InputError(f"{at(fact)}: unknown host fact {fact!r}{did_you_mean(fact, facts)}")
                yield option, raw, at(fact)
            continue
        option = OPTIONS_BY_NAME.get(key)
        if option is None or option.host_fact:
            names = [o.name for o in OPTIONS if not o.host_fact] + ["host"]
            raise InputError(f"{at(key)}: unknown setting {key!r}{did_you_mean(key, names)}")
        yield option, value, at(key)


def config_files_source(env: Mapping[str, str]) -> Iterator[Raw]:
    """The system then the user config file, or only ``$HVD_SELECTOR_CONFIG`` (which must exist)."""
    from selector_backend.files.tomlfile import load_toml

    explicit = env.get(ENV_PREFIX + "CONFIG")
    for path in config_file_candidates(env):
        if path.is_file():
            doc = load_toml(path)
            yield from toml_source(doc.data, str(path), doc.locate)
            continue
        named = f"{ENV_PREFIX}CONFIG={path}" if explicit else f"config file {path}"
        if path.is_symlink() and not path.exists():
            raise InputError(f"{named}: a link to {os.readlink(path)}, which does not exist (fix or remove the link)")
        if path.is_dir():
            raise InputError(f"{named}: a directory, not a TOML file")
        if path.exists():
            raise InputError(f"{named}: not a regular file")
        if explicit:
            raise InputError(f"{named}: no such file")


def env_source(env: Mapping[str, str]) -> Iterator[Raw]:
    """``HVD_SELECTOR_<NAME>`` for every knob; ``HVD_SELECTOR`` alone is the selector (the short form)."""
    known = {o.env: o for o in OPTIONS}
    if "HVD_SELECTOR" in env and ENV_PREFIX + "SELECTOR" not in env:
        yield OPTIONS_BY_NAME["selector"], env["HVD_SELECTOR"], "HVD_SELECTOR"
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in OTHER_ENV:
            continue
        option = known.get(name)
        if option is None:
            raise InputError(f"unknown environment variable {name}{did_you_mean(name, [*known, *OTHER_ENV])}")
        yield option, value, name


def config_settings_source(config_settings: Mapping[str, Any]) -> Iterator[Raw]:
    """PEP 517 ``config_settings`` (pip's ``-C``) and the CLI's ``-C``/``--selector``/``--host-profile``."""
    for key, value in config_settings.items():
        option = OPTIONS_BY_NAME.get(key)
        if option is None:
            raise InputError(
                f"unknown config setting -C {key}{did_you_mean(key, OPTIONS_BY_NAME)}; "
                f"valid: {', '.join(OPTIONS_BY_NAME)}"
            )
        yield option, value, f"-C {key}"


def load_settings(
    config_settings: Mapping[str, Any] | None = None,
    *,
    pyproject: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge every source in precedence order into one checked Settings value.

    ``recorded``: an installed copy's defaults from its install record (the
    variant index it came from), below every other source.
    """
    env = os.environ if environ is None else environ
    chain = (
        toml_source(recorded or {}, RECORDED),
        toml_source(pyproject or {}, "pyproject.toml [tool.hvd-selector]"),
        config_files_source(env),
        env_source(env),
        config_settings_source(config_settings or {}),
    )
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for source in chain:  # lowest first: a later source overwrites
        for option, raw, where in source:
            values[option.name] = option.parse_value(raw, where)
            origins[option.name] = where
    for option in OPTIONS:
        if option.compute is not None and option.name not in values:
            values[option.name] = option.compute(env)
    host = HostFacts(**{o.attr: values[o.name] for o in OPTIONS if o.host_fact and o.name in values})
    top = {o.attr: values[o.name] for o in OPTIONS if not o.host_fact and o.name in values}
    settings = Settings(**top, host=host, origins=MappingProxyType(origins))
    if environ is None:  # this process's own settings: the catalog memo goes to their cache directory
        from selector_backend.files.private_cache import use_cache_dir

        use_cache_dir(settings.cache_dir)
    return settings


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One knob from the environment alone (or its default), for code that runs without Settings."""
    env = os.environ if environ is None else environ
    option = OPTIONS_BY_NAME[name]
    return option.parse_value(env[option.env], option.env) if option.env in env else option.default
