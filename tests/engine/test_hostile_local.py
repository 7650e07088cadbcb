"""Issue 12 finding 5/6: bad local values and hostile local files end in one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from .engine_helpers import Cli


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_run_timeout_must_be_finite_and_positive(cli: Cli, value: str) -> None:
    result = cli("run", "-np", "1", f"--timeout={value}", "python", "-c", "pass")
    assert result.rc == 2, result
    assert "--timeout must be a positive number of seconds" in result.one_line_error()


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"HVD_SELECTOR_DETECT_TIMEOUT": "abc"}, "HVD_SELECTOR_DETECT_TIMEOUT='abc' is not a number of seconds"),
        ({"HVD_SELECTOR_DETECT_TIMEOUT": "nan"}, "HVD_SELECTOR_DETECT_TIMEOUT='nan' must be between 0 and 3600"),
        ({"HVD_SELECTOR_GPUS": "999.9"}, "compute capability '999.9' is not like 8.0 or sm_80"),
        ({"HVD_SELECTOR_GPUS": "sm_1000"}, "compute capability 'sm_1000'"),
        ({"HVD_SELECTOR_INDEX_TIMEOUT": "nan"}, "index-timeout='nan' must be between 0 and 3600"),
        ({"HVD_SELECTOR_DOWNLOAD_TIMEOUT": "inf"}, "download-timeout='inf' must be between 0 and 3600"),
        ({"HVD_SELECTOR_INDEX_FILE_ORIGINS": "ftp://x"}, "'ftp://x' is not an origin like https://"),
        ({"HVD_SELECTOR_INDEX_FILE_ORIGINS": "http://cdn.example.org"}, "plain http is allowed only on loopback"),
    ],
)
def test_bad_environment_values_are_errors(cli: Cli, env: dict[str, str], fragment: str) -> None:
    result = cli("resolve", env=env)
    assert result.rc == 2, result
    assert fragment in result.one_line_error()


CONFIG_FILES = {
    "deep": ("index-url = " + "[" * 100_000).encode(),
    "deep table": ("x = " + "{a = " * 50_000).encode(),
    "not utf-8": b'selector = "\xff\xfe"\n',
    "wrong type": b"index-timeout = [1]\n",
    "bool timeout": b'index-retries = "many"\n',
}


HOST_PROFILES = {
    "deep": b'{"gpus": ' + b"[" * 500_000,
    "not utf-8": b'{"os": "\xff"}',
    "memory a bool": b'{"gpus": [{"compute_capability": "8.0", "memory_mib": true}]}',
    "cc an object": b'{"gpus": [{"compute_capability": {"a": 1}}]}',
    "features ints": b'{"cpu": {"microarch": "zen3", "features": [1]}}',
    "a list": b"[1, 2]",
}


# the file a hostile value sits in -> how the CLI is pointed at it
HOSTILE_FILES = [("config", case) for case in sorted(CONFIG_FILES)] + [("host", case) for case in sorted(HOST_PROFILES)]


@pytest.mark.parametrize(("kind", "case"), HOSTILE_FILES)
def test_hostile_local_file_is_one_line(cli: Cli, tmp_path: Path, kind: str, case: str) -> None:
    path = tmp_path / ("config.toml" if kind == "config" else "host.json")
    path.write_bytes(CONFIG_FILES[case] if kind == "config" else HOST_PROFILES[case])
    if kind == "config":
        result = cli("resolve", env={"HVD_SELECTOR_CONFIG": str(path)})
    else:
        result = cli("resolve", "--host-profile", str(path))
    assert result.rc == 2, result
    assert str(path) in result.one_line_error()
