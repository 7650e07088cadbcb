"""Typos and broken settings files as a user meets them: one line that says what to do, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector_backend.engine.host import HostProfile

from .engine_helpers import NVML, Cli


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["resolv"], "invalid choice 'resolv' (did you mean resolve?); choose from detect, resolve,"),
        (
            ["spack", "pakage"],
            "invalid choice 'pakage' (did you mean package?); choose from spec, parse, pick, package",
        ),
        (["matrix", "--format", "gihub"], "invalid choice 'gihub' (did you mean github?); choose from github, json"),
    ],
)
def test_a_mistyped_command_or_choice_gets_a_suggestion(cli: Cli, argv: list[str], expected: str) -> None:
    result = cli(*argv)
    assert result.rc == 2 and "Traceback" not in result.err
    assert expected in result.err.splitlines()[-1], result.err


def test_an_unknown_cpu_target_names_the_closest_few_and_where_all_are(cli: Cli) -> None:
    line = cli("resolve", "-C", "target=zen33").one_line_error()
    assert "unknown CPU target 'zen33' (did you mean zen3?); close: zen3," in line, line
    assert "hvd-selector detect --targets" in line and len(line) < 200, line  # was ~100 names on one line
    listed = cli("detect", "--targets")
    assert listed.rc == 0
    families = dict(row.split(": ", 1) for row in listed.out.splitlines())
    assert "zen3" in families["x86_64"].split() and "neoverse_v2" in families["aarch64"].split()
    assert families["x86_64"].split()[0] == "x86_64"  # generic first


@pytest.mark.parametrize("kind", ["directory", "dangling link"])
def test_a_user_config_file_that_is_not_a_file_is_an_error_not_ignored(cli: Cli, tmp_path: Path, kind: str) -> None:
    config = tmp_path / "xdg-config" / "hvd-selector" / "config.toml"  # the cli fixture's XDG_CONFIG_HOME
    config.parent.mkdir(parents=True)
    if kind == "directory":
        config.mkdir()
    else:
        config.symlink_to(tmp_path / "moved.toml")
    result = cli("resolve")
    line = result.one_line_error()
    assert result.rc == 2 and f"config file {config}: " in line, line
    assert ("a directory" if kind == "directory" else "which does not exist") in line, line


def test_hvd_selector_config_naming_a_directory_says_so(cli: Cli, tmp_path: Path) -> None:
    result = cli("resolve", env={"HVD_SELECTOR_CONFIG": str(tmp_path)})
    assert result.rc == 2 and result.one_line_error().endswith(
        f"HVD_SELECTOR_CONFIG={tmp_path}: a directory, not a TOML file"
    )
    missing = cli("resolve", env={"HVD_SELECTOR_CONFIG": str(tmp_path / "none.toml")})
    assert missing.rc == 2 and missing.one_line_error().endswith("no such file")


def test_the_gpu_reason_names_every_model_of_a_mixed_host(cli: Cli) -> None:
    """A T4 + A6000 workstation (recorded NVML answers) is not "2x Tesla T4"."""
    replay = {"HVD_SELECTOR_NVML_REPLAY": str(NVML / "mixed_t4_a6000.json")}
    result = cli("resolve", "--explain", env=replay)
    assert result.rc == 0, result
    assert "NVIDIA GPU present (1x Tesla T4, 1x NVIDIA RTX A6000)" in result.out, result.out
    host = HostProfile.from_json(json.loads(cli("detect", "--json", env=replay).out))
    assert host.describe_nvidia_gpus(capability=True) == "1x Tesla T4 (7.5), 1x NVIDIA RTX A6000 (8.6)"
