"""Exhaustive float16/bfloat16 checks of the reduction kernels for every target.

The kernels pick different code per target (portable bit tricks, F16C,
AVX-512, AArch64 half conversion); each must round exactly like the
reference (float32 arithmetic, round to nearest even). The harness is
compiled with archspec's flags for each target; aarch64 runs under qemu-user
when a cross compiler is installed. Takes a few seconds.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from devtools.native_builds import REPO

HARNESS = Path(__file__).resolve().parent / "kernels" / "check_kernels.cpp"
SOURCES = [REPO / "native" / "src" / "kernels_cpu.cpp", REPO / "native" / "src" / "common.cpp"]
HOST_TARGETS = ["x86_64", "x86_64_v3", "x86_64_v4"]


def _flags(target: str) -> list[str]:
    import archspec.cpu

    return archspec.cpu.TARGETS[target].optimization_flags("gcc", "12.2.0").split()


def _compile(compiler: str, target: str, out: Path) -> Path:
    cmd = [
        compiler,
        "-O3",
        "-std=c++17",
        *_flags(target),
        f"-I{REPO / 'native' / 'include'}",
        f"-I{REPO / 'native' / 'src'}",
        str(HARNESS),
        *map(str, SOURCES),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


Compiled = Callable[[str, str], Path]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    """The harness for (compiler, target), compiled once for this module: two tests run each x86_64 target."""
    folder = tmp_path_factory.mktemp("kernels")

    @functools.cache
    def binary(compiler: str, target: str) -> Path:
        return _compile(compiler, target, folder / f"check-{compiler}-{target}")

    return binary


def _run(binary: Path, op: str, qemu: bool = False) -> bytes:
    cmd = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", str(binary), op] if qemu else [str(binary), op]
    return subprocess.run(cmd, check=True, capture_output=True, timeout=120).stdout


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    return a, a[::-1].copy()


def _same_bits(got: np.ndarray, want: np.ndarray, as_float: np.ndarray) -> None:
    nan = np.isnan(as_float)
    bad = (got != want) & ~nan
    assert not bad.any(), f"{bad.sum()} mismatches, first at {np.flatnonzero(bad)[:5]}"


def _check(run) -> None:
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, overflow: expected inputs
        _check_all(run)


def _check_all(run) -> None:
    torch = pytest.importorskip("torch")
    a, b = _inputs()
    # float16: float32 sum rounded to nearest even (numpy's float32->float16 is RNE).
    want16 = (a.view(np.float16).astype(np.float32) + b.view(np.float16).astype(np.float32)).astype(np.float16)
    got16 = np.frombuffer(run("sum16"), dtype=np.uint16)
    _same_bits(got16, want16.view(np.uint16), want16.astype(np.float32))
    # float16 scale by 0.3 (in float32).
    wants = (a.view(np.float16).astype(np.float32) * np.float32(0.3)).astype(np.float16)
    _same_bits(np.frombuffer(run("scale16"), dtype=np.uint16), wants.view(np.uint16), wants.astype(np.float32))
    # bfloat16 through torch's round-to-nearest-even conversion.
    fa = torch.from_numpy((a.astype(np.uint32) << 16).view(np.float32))
    fb = torch.from_numpy((b.astype(np.uint32) << 16).view(np.float32))
    wantbf = (fa + fb).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    gotbf = np.frombuffer(run("sumbf16"), dtype=np.uint16)
    _same_bits(gotbf, wantbf, (fa + fb).numpy())
    # float32 ops.
    x = (np.arange(1000) % 13 - 6).astype(np.float32)
    y = (np.arange(1000) % 7 - 3).astype(np.float32)
    want32 = np.concatenate([x + y, np.minimum(x, y), np.maximum(x, y), x * y])
    assert np.array_equal(np.frombuffer(run("f32"), dtype=np.float32), want32)
    # the vector copy of the shared-memory transport: every length and misalignment
    assert run("copy") == b"ok"


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_kernels_round_exactly(target: str, compiled: Compiled) -> None:
    import archspec.cpu

    from selector_backend.engine import targets

    host = archspec.cpu.host()
    if not targets.runs_on(target, str(host.name)):
        pytest.skip(f"this CPU cannot run {target}")
    binary = compiled("g++", target)
    _check(lambda op: _run(binary, op))


@pytest.mark.parametrize("target", ["aarch64", "neoverse_v1"])
def test_kernels_round_exactly_on_aarch64(target: str, compiled: Compiled) -> None:
    if not shutil.which("aarch64-linux-gnu-g++") or not shutil.which("qemu-aarch64"):
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    binary = compiled("aarch64-linux-gnu-g++", target)
    _check(lambda op: _run(binary, op, qemu=True))


def test_kernels_agree_bitwise_across_targets(compiled: Compiled) -> None:
    """Ranks of one job may run different targets: every bit must match, NaN payloads included."""
    import archspec.cpu

    from selector_backend.engine import targets

    host = archspec.cpu.host().name
    runnable = [t for t in HOST_TARGETS if targets.cpu_verdict(t, host)[0]]
    if len(runnable) < 2:
        pytest.skip("fewer than two x86_64 targets run on this CPU")
    outputs = {}
    for target in runnable:
        binary = compiled("g++", target)
        outputs[target] = {op: _run(binary, op) for op in ("sum16", "sumbf16", "scale16")}
    first = runnable[0]
    for target in runnable[1:]:
        for op, data in outputs[target].items():
            got, want = np.frombuffer(data, np.uint16), np.frombuffer(outputs[first][op], np.uint16)
            bad = np.flatnonzero(got != want)
            assert not bad.size, f"{op}: {target} and {first} differ at {bad.size} values, e.g. inputs {bad[:4]}"
