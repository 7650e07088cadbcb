"""Issues 12 and 27: bad local values, hostile and special local files, and output paths that are not
regular files end in one line and exit 2, without hanging or reading without bound."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .engine_helpers import ROOT, Cli, CliResult, clean_env


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


# ------------------------------------------------------------------ issue 27: special files as input
# Every option and variable that names a file to read, as a command line taking that file at PATH.
FILE_INPUTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "--host-profile": (["resolve", "--host-profile", "PATH"], {}),
    "HVD_SELECTOR_HOST_PROFILE": (["resolve"], {"HVD_SELECTOR_HOST_PROFILE": "PATH"}),
    "--catalog": (["resolve", "--catalog", "PATH"], {}),
    "plan FLEET": (["plan", "PATH"], {}),
    "matrix --plan": (["matrix", "--plan", "PATH"], {}),
    "matrix --check": (["matrix", "--catalog", "variants/catalog.toml", "--check", "PATH"], {}),
    "doctor --variant-json": (["doctor", "--variant-json", "PATH"], {}),
    "spack pick": (["spack", "pick", "PATH"], {}),
    "HVD_SELECTOR_NVML_REPLAY": (["detect"], {"HVD_SELECTOR_NVML_REPLAY": "PATH"}),
    "HVD_SELECTOR_CONFIG": (["resolve"], {"HVD_SELECTOR_CONFIG": "PATH"}),
}
SPECIAL = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "/dev/zero": "is a character device, not a regular file",
    "/dev/urandom": "is a character device, not a regular file",
    "directory": "is a directory, not a regular file",
}
PEAK_RSS_MIB = 400  # a CLI run takes well under 150 MiB; reading /dev/zero whole took 4 GB


def _special(tmp_path: Path, kind: str) -> Path:
    if kind.startswith("/dev/"):
        return Path(kind)
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


#: Runs argv[2:] and writes its peak resident KiB to argv[1]. A child started straight from the test
#: process would not do: Python starts it with vfork, and until its exec the child's peak is this
#: process's (hundreds of MiB once torch is loaded), so the child must come from a small process.
PEAK_OF = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def measured(tmp_path: Path, args: list[str], env: dict[str, str]) -> tuple[CliResult, float, float]:
    """Run the CLI; (result, seconds, peak resident MiB of the CLI's own process). A run that does
    not end within 30 s is a hang: killed, and the test fails."""
    out_path, err_path, peak_path = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "peak-kib"
    start = time.monotonic()
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", PEAK_OF, str(peak_path), sys.executable, "-m", "selector_backend", *args],
            cwd=ROOT,
            env=clean_env(tmp_path, env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"hvd-selector {' '.join(args)} with {env} hung") from None
    done = subprocess.CompletedProcess(args, proc.returncode, out_path.read_text(), err_path.read_text())
    return CliResult(done), time.monotonic() - start, int(peak_path.read_text()) / 1024


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("option", sorted(FILE_INPUTS))
def test_a_special_file_as_input_is_one_line(tmp_path: Path, option: str, kind: str) -> None:
    """A FIFO (which would hang every read), /dev/zero and /dev/urandom (read until memory ran out) and
    a directory: one line naming the path, exit 2, without reading a byte (peak memory stays small)."""
    path = str(_special(tmp_path, kind))
    argv, env = FILE_INPUTS[option]
    args = [path if a == "PATH" else a for a in argv]
    result, _, peak_mib = measured(tmp_path, args, {k: path if v == "PATH" else v for k, v in env.items()})
    assert result.rc == 2, result
    line = result.one_line_error()
    assert path in line, line
    if option != "HVD_SELECTOR_CONFIG" and not (option == "spack pick" and kind == "directory"):
        assert SPECIAL[kind] in line, line  # (a config path that is no file, and a mirror directory, say so)
    assert peak_mib < PEAK_RSS_MIB, peak_mib


def test_the_variant_provider_refuses_a_special_host_profile(tmp_path: Path) -> None:
    """The variantlib provider reads the host profile through the same reader (a FIFO hung it)."""
    fifo = _special(tmp_path, "fifo")
    code = (
        "from selector_backend.errors import InputError\n"
        "from selector_backend.publishing.variant_provider import HvdSelectorProvider\n"
        "try:\n    HvdSelectorProvider.get_supported_configs()\n"
        "except InputError as exc:\n    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean_env(tmp_path, {"HVD_SELECTOR_HOST_PROFILE": str(fifo)}),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{fifo}: host profile is a FIFO (named pipe)" in proc.stdout


DEEP = b'{"variants": ' + b"[" * 200_000
BAD_INPUTS = {
    "plan: deep JSON": (["plan", "PATH"], DEEP, "nested too deep"),
    "matrix --plan: deep JSON": (["matrix", "--plan", "PATH"], DEEP, "nested too deep"),
    "spack pick: deep JSON": (["spack", "pick", "PATH"], b'{"database": ' + b"[" * 200_000, "nested too deep"),
    "doctor --variant-json: not UTF-8": (["doctor", "--variant-json", "PATH"], b'{"variants": "\xff"}', "not UTF-8"),
    "NVML_REPLAY: deep JSON": (["detect"], b'{"devices": ' + b"[" * 200_000, "nested too deep"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_file_contents_are_one_line(cli: Cli, tmp_path: Path, case: str) -> None:
    argv, content, fragment = BAD_INPUTS[case]
    path = tmp_path / "input.json"
    path.write_bytes(content)
    args = [str(path) if a == "PATH" else a for a in argv]
    env = {"HVD_SELECTOR_NVML_REPLAY": str(path)} if case.startswith("NVML") else {}
    result = cli(*args, env=env)
    assert result.rc == 2, result
    line = result.one_line_error()
    assert str(path) in line and fragment in line, line


def test_a_file_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    """A sparse 100 GiB host profile: its size is checked on fstat, nothing is read."""
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(100 << 30)
    result, _, peak_mib = measured(tmp_path, ["resolve", "--host-profile", str(big)], {})
    assert result.rc == 2, result
    assert "host profile is 100 GiB, over the 64 MiB limit" in result.one_line_error()
    assert peak_mib < PEAK_RSS_MIB


# ------------------------------------------------------------------ issue 27: output options
# Every option that writes a file the user names, as a command line writing to PATH.
OUTPUTS: dict[str, list[str]] = {
    "matrix -o": ["matrix", "-o", "PATH"],
    "plan -o": ["plan", "FLEET", "-o", "PATH"],
    "cmake-config --write": ["cmake-config", "--write", "PATH", "target=x86_64"],
}


def _output_args(option: str, target: Path, tmp_path: Path) -> list[str]:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([{"cpu": {"microarch": "zen3"}, "platform": "linux", "machine": "x86_64"}]))
    return [str(target) if a == "PATH" else str(fleet) if a == "FLEET" else a for a in OUTPUTS[option]]


def _identity(path: Path) -> tuple[int, int, int, int]:
    info = path.lstat()
    return info.st_mode, info.st_ino, info.st_rdev, info.st_size


@pytest.mark.parametrize("kind", ["fifo", "character device", "directory", "symlink"])
@pytest.mark.parametrize("option", sorted(OUTPUTS))
def test_an_output_option_writes_over_regular_files_only(cli: Cli, tmp_path: Path, option: str, kind: str) -> None:
    """``-o /dev/null`` run as root replaced the system's /dev/null: a FIFO, a device (made with mknod
    here, never the system's), a directory and a link are left as they are, with one line and exit 2."""
    where = tmp_path / "out"
    where.mkdir()
    target = where / "target"
    victim = tmp_path / "victim.yml"
    victim.write_text("the link's target, untouched\n")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "character device":
        if os.geteuid() != 0:
            pytest.skip("mknod of a device node needs root")
        os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers, in our directory
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to(victim)
    before = _identity(target)
    result = cli(*_output_args(option, target, tmp_path))
    assert result.rc == 2, result
    line = result.one_line_error()
    assert str(target) in line and "refusing to replace it" in line, line
    assert _identity(target) == before
    assert victim.read_text() == "the link's target, untouched\n"
    assert sorted(p.name for p in where.iterdir()) == ["target"]  # no temporary file left behind


@pytest.mark.parametrize("option", sorted(OUTPUTS))
def test_an_output_option_replaces_a_regular_file_keeping_its_mode(cli: Cli, tmp_path: Path, option: str) -> None:
    target = tmp_path / "existing"
    target.write_text("old\n")
    target.chmod(0o640)
    result = cli(*_output_args(option, target, tmp_path))
    assert result.rc == 0, result
    assert target.read_text() != "old\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    fresh = tmp_path / "new" / "dir" / "file"
    assert cli(*_output_args(option, fresh, tmp_path)).rc == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_spack_package_write_is_refused_over_a_fifo(cli: Cli, tmp_path: Path) -> None:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.interop.spack.package_py import package_path

    repo = tmp_path / "spack"
    target = package_path(load_catalog(), repo)
    target.parent.mkdir(parents=True)
    os.mkfifo(target)
    result = cli("spack", "package", "--write", "--repo", str(repo))
    assert result.rc == 2, result
    assert "is a FIFO (named pipe): package.py (--write) is written only to a regular file" in result.one_line_error()
    assert stat.S_ISFIFO(target.lstat().st_mode)
