"""Small builders shared by the engine tests: paths, a clean environment, host
profiles, and the result of one CLI run (the ``cli`` fixture in conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from selector_backend.engine.host import CpuInfo, GpuInfo, HostProfile, LibraryInfo

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
NVML = DATA / "nvml"


def nested_pytest_env(*drop: str, **extra: str) -> dict[str, str]:
    """This environment for a pytest a test starts: no third-party plugins loaded by themselves, none
    of the outer run's PYTEST_ADDOPTS (its ``-p`` plugins may not import from the inner run's folder),
    and without the ``drop`` names."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", *drop)}
    return env | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} | extra


class CliResult:
    """A finished ``python -m selector_backend`` run."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        return json.loads(self.out)

    def one_line_error(self) -> str:
        """The single error line a user sees; fails on tracebacks or chatter."""
        assert "Traceback" not in self.err, self.err
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one error line, got:\n{self.err}"
        assert lines[0].startswith("hvd-selector: error: "), lines[0]
        return lines[0]

    def __repr__(self) -> str:
        return f"CliResult(rc={self.rc}, err={self.err[-2000:]!r})"


Cli = Callable[..., CliResult]


def clean_env(tmp: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus every HVD_SELECTOR_* setting, with config
    lookups pointed at an empty directory so no user or CI config leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    env["XDG_CONFIG_HOME"] = str(tmp / "xdg-config")
    env["XDG_CACHE_HOME"] = str(tmp / "xdg-cache")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def make_host(
    microarch: str | None = "icelake",
    gpus: Sequence[str] = (),
    driver: str | None = None,
    mpi: str | None = None,
    os_name: str = "ubuntu24.04",
) -> HostProfile:
    """A HostProfile built the way a profile file would describe it."""
    cpu = CpuInfo.from_microarch(microarch) if microarch else None
    return HostProfile(
        platform="linux",
        os=os_name,
        machine=cpu.family if cpu else "x86_64",
        libc="glibc 2.39",
        python="cp311",
        cpu=cpu,
        gpus=tuple(GpuInfo("nvidia", f"GPU {cc}", cc, None) for cc in gpus),
        cuda_driver=driver,
        libraries={
            "mpi": LibraryInfo(mpi, "4.2.0") if mpi else None,
            "nccl": None,
            "gloo": None,
        },
    )
