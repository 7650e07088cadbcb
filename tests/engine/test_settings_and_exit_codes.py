"""Where settings come from (-C > env > config file > default) and what resolve exits with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selector_backend import settings as settings_mod
from selector_backend.errors import InputError


def write_config(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def microarch(result: Any) -> str:
    assert result.rc == 0, result
    return str(result.json()["cpu"]["microarch"])


# ------------------------------------------------------------------ precedence, through the CLI
def test_precedence_cli_over_env_over_config_over_default(cli: Any, tmp_path: Path) -> None:
    import archspec.cpu

    write_config(tmp_path / "xdg-config" / "hvd-selector" / "config.toml", '[host]\ntarget = "x86_64_v2"\n')
    assert microarch(cli("detect", "--json")) == "x86_64_v2"  # config file (XDG_CONFIG_HOME)
    env = {"HVD_SELECTOR_TARGET": "haswell"}
    assert microarch(cli("detect", "--json", env=env)) == "haswell"  # env beats the file
    assert microarch(cli("detect", "--json", "-C", "target=zen2", env=env)) == "zen2"  # -C beats env
    (tmp_path / "xdg-config" / "hvd-selector" / "config.toml").unlink()
    assert microarch(cli("detect", "--json")) == archspec.cpu.host().name  # default: detected


def test_explicit_config_file_replaces_the_user_file(cli: Any, tmp_path: Path) -> None:
    write_config(tmp_path / "xdg-config" / "hvd-selector" / "config.toml", '[host]\ntarget = "x86_64_v2"\n')
    explicit = write_config(tmp_path / "team.toml", '[host]\ntarget = "zen3"\n')
    data = cli("detect", "--json", env={"HVD_SELECTOR_CONFIG": str(explicit)}).json()
    assert data["cpu"]["microarch"] == "zen3"
    assert any(f"override: target=zen3 (from {explicit}:2)" in n for n in data["notes"]), data["notes"]
    missing = cli("detect", env={"HVD_SELECTOR_CONFIG": str(tmp_path / "nope.toml")})
    assert missing.rc == 2 and "HVD_SELECTOR_CONFIG=" in missing.one_line_error()


def test_selector_precedence_in_resolve(cli: Any, tmp_path: Path) -> None:
    write_config(tmp_path / "xdg-config" / "hvd-selector" / "config.toml", 'selector = "target=x86_64"\n')
    base = {"HVD_SELECTOR_TARGET": "icelake", "HVD_SELECTOR_GPUS": "none"}
    pick = lambda r: r.json()["selected"]["variant"]["target"]  # noqa: E731
    assert pick(cli("resolve", "--json", env=base)) == "x86_64"
    assert pick(cli("resolve", "--json", env={**base, "HVD_SELECTOR_SELECTOR": "target=x86_64_v3"})) == "x86_64_v3"
    both = cli("resolve", "--json", "--selector", "auto", env={**base, "HVD_SELECTOR_SELECTOR": "target=x86_64_v3"})
    assert pick(both) == "x86_64_v4"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('selector = "cpu"\nslector = "gpu-nvidia"\n', 2, "unknown setting 'slector' (did you mean selector?)"),
        ('offline = true\n\n[host]\ngpu = "8.0"\n', 4, "unknown host fact 'gpu' (did you mean gpus?)"),
        ('build-policy = "sometimes"\n', 1, "unknown value for build-policy 'sometimes'"),
        ('[host]\ntarget = "zen33"\n', 2, "unknown CPU target 'zen33' (did you mean zen3?)"),
        ('selector = "cpu\n', None, "invalid TOML"),
    ],
)
def test_bad_config_file_names_file_and_line(
    cli: Any, tmp_path: Path, text: str, line: int | None, message: str
) -> None:
    path = write_config(tmp_path / "cfg.toml", text)
    result = cli("detect", env={"HVD_SELECTOR_CONFIG": str(path)})
    assert result.rc == 2, result
    error = result.one_line_error()
    assert message in error
    assert (f"{path}:{line}: " if line else f"{path}: ") in error


# ------------------------------------------------------------------ precedence, in process
def test_load_settings_origins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path / "c.toml", 'selector = "cpu"\noffline = true\ncache-dir = "/tmp/c"\n')
    monkeypatch.setenv("HVD_SELECTOR_CONFIG", str(config))
    env = {"HVD_SELECTOR_CONFIG": str(config), "HVD_SELECTOR_OFFLINE": "0"}
    loaded = settings_mod.load_settings(
        {"cache-dir": "/tmp/cli"}, pyproject={"selector": "gpu-nvidia", "build-policy": "never-build"}, environ=env
    )
    assert loaded.selector == "cpu" and loaded.origins["selector"] == f"{config}:1"
    assert loaded.offline is False and loaded.origins["offline"] == "HVD_SELECTOR_OFFLINE"
    assert loaded.cache_dir == Path("/tmp/cli") and loaded.origins["cache-dir"] == "-C cache-dir"
    assert loaded.build_policy == "never-build"  # pyproject is the lowest source
    assert loaded.index_url == ()  # untouched: the default


def test_every_option_has_an_env_name_and_a_help_line() -> None:
    from selector_backend.settings.docs import documented_options

    names = [o.name for o in settings_mod.OPTIONS]
    assert len(names) == len(set(names))
    for option in documented_options():
        assert option.env == "HVD_SELECTOR_" + option.name.upper().replace("-", "_")
        assert option.help.strip()


def test_bad_c_value_names_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("HVD_SELECTOR_CONFIG", raising=False)
    with pytest.raises(InputError, match=r"^-C offline: offline='perhaps' is not a boolean"):
        settings_mod.load_settings({"offline": "perhaps"}, environ={})


# ------------------------------------------------------------------ exit codes
def test_resolve_exit_codes(cli: Any, write_json: Any) -> None:
    icelake = write_json("icelake.json", {"cpu": {"microarch": "icelake"}})
    power = write_json("power.json", {"cpu": {"microarch": "power9le"}})
    assert cli("resolve", "--host-profile", str(icelake)).rc == 0
    assert cli("resolve", "--require-prebuilt", "--host-profile", str(icelake)).rc == 0
    # nothing prebuilt fits x86_64_v2: 0 without --require-prebuilt (a source build is named), 3 with it
    v2 = cli("resolve", "--host-profile", str(icelake), "--selector", "target=x86_64_v2")
    assert v2.rc == 0 and "source build would target: target=x86_64_v2" in v2.out
    assert (
        cli("resolve", "--require-prebuilt", "--host-profile", str(icelake), "--selector", "target=x86_64_v2").rc == 3
    )
    # a POWER9 host: no prebuilt variant and no catalog target to build -> 3 even without --require-prebuilt
    plain = cli("resolve", "--host-profile", str(power))
    assert plain.rc == 3 and "nothing prebuilt fits" in plain.out
    assert "no prebuilt variant and no source build" in plain.one_line_error()
    strict = cli("resolve", "--require-prebuilt", "--host-profile", str(power))
    assert strict.rc == 3
    assert "no prebuilt variant" in strict.one_line_error()
    gpu = cli("resolve", "--require-prebuilt", "--selector", "gpu-nvidia", "--host-profile", str(icelake))
    assert gpu.rc == 3
    # --json still prints the whole resolution before exiting 3
    as_json = cli("resolve", "--json", "--require-prebuilt", "--host-profile", str(power))
    assert as_json.rc == 3 and as_json.json()["selected"] is None
    assert cli("resolve", "--selector", "gpu-nvida").rc == 2
    assert cli("resolve", "--bogus").rc == 2


def test_no_command_is_usage_error(cli: Any) -> None:
    result = cli()
    assert result.rc == 2 and "COMMAND" in result.out
