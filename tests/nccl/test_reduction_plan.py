"""How each dtype x op reduces on NCCL (native/nccl/plan.h), checked without a
GPU: the plan is plain C++, compiled here with the host compiler and printed
for every dtype, op, prescale and fold setting. The real plugin executes this
plan with CUDA and NCCL; the stand-in plugin executes it over host memory
(test_gpu_path_standin.py), where its results are compared with the CPU path."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .nccl_helpers import ROOT

HARNESS = Path(__file__).resolve().parent / "plan" / "print_plans.cpp"
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "int8", "int16", "bool"]
OPS = ["sum", "average", "min", "max", "product"]
WIRES = ["uint8", "int8", "int32", "uint32", "int64", "float16", "bfloat16", "float32", "float64"]
REDS = ["sum", "prod", "min", "max", "premulsum"]
# NCCL's own type for each dtype it has; int16 travels as 32-bit integers, bool as uint8.
NATIVE = {d: d for d in DTYPES[:8]} | {"bool": "uint8"}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    binary = tmp_path_factory.mktemp("plan") / "print_plans"
    include = [f"-I{ROOT / 'native' / 'include'}", f"-I{ROOT / 'native' / 'nccl'}"]
    subprocess.run([compiler, "-std=c++17", "-O1", *include, str(HARNESS), "-o", str(binary)], check=True)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _valid(plans: list[dict[str, object]]) -> list[dict[str, object]]:
    return [p for p in plans if int(p["dtype"]) < len(DTYPES) and int(p["op"]) < len(OPS)]  # type: ignore[call-overload]


def test_unknown_codes_are_refused(plans: list[dict[str, object]]) -> None:
    for p in plans:
        unknown_dtype, unknown_op = p["dtype"] == len(DTYPES), p["op"] == len(OPS)
        if unknown_op:
            assert p["error"] == "unknown reduction op", p
        elif unknown_dtype:
            assert p["error"] == "unknown dtype", p
        else:
            assert p["error"] is None, p


def test_every_dtype_reduces_in_an_nccl_type(plans: list[dict[str, object]]) -> None:
    for p in _valid(plans):
        dtype, op = DTYPES[p["dtype"]], OPS[p["op"]]  # type: ignore[index]
        wire = WIRES[p["wire"]]  # type: ignore[index]
        if dtype == "int16":  # signed compares need the sign; sums and products wrap the same mod 2^16
            assert p["widen"] == 1 and wire == ("int32" if op in ("min", "max") else "uint32"), p
        else:
            assert p["widen"] == 0 and wire == NATIVE[dtype], p


def test_ops_and_bool_logic(plans: list[dict[str, object]]) -> None:
    for p in _valid(plans):
        dtype, op, red = DTYPES[p["dtype"]], OPS[p["op"]], REDS[p["red"]]  # type: ignore[index]
        if dtype == "bool":  # the CPU path's logical or / and on 0/1 bytes
            assert red == ("min" if op in ("min", "product") else "max"), p
        elif red != "premulsum":
            assert red == {"sum": "sum", "average": "sum", "product": "prod"}.get(op, op), p


def _exact_in(dtype: str, factor: float) -> bool:
    """Whether NCCL multiplying by the factor in the dtype gives the separate pass's bits."""
    if dtype in ("float16", "float32", "float64"):  # the pass multiplies by the factor in this very type
        return True
    if dtype == "bfloat16":  # the pass multiplies in float32: only a factor exact in bfloat16 rounds once either way
        return factor in (0.5, 3.0, 65536.0)
    return False  # integers and bool scale in a separate pass (or not at all)


def test_prescale_folds_into_premulsum_only_where_it_gives_the_passs_bits(plans: list[dict[str, object]]) -> None:
    folded = 0
    for p in _valid(plans):
        dtype, op, red = DTYPES[p["dtype"]], OPS[p["op"]], REDS[p["red"]]  # type: ignore[index]
        pre = float(p["pre"])  # type: ignore[arg-type]
        # never at one rank: NCCL's one-rank PreMulSum kernel left an element unscaled on an H200 (plan.h)
        fold = bool(p["fold"]) and p["size"] > 1 and pre != 1.0 and op in ("sum", "average") and _exact_in(dtype, pre)
        assert (red == "premulsum") == fold, p
        folded += fold
        scale = 1.0 if dtype == "bool" else pre
        assert p["premul"] == (pre if fold else 1.0) and p["plan_pre"] == (1.0 if fold else scale), p
    assert folded > 0


def test_postscale_and_average(plans: list[dict[str, object]]) -> None:
    for p in _valid(plans):
        dtype, op = DTYPES[p["dtype"]], OPS[p["op"]]  # type: ignore[index]
        want = 1.0 if dtype == "bool" else (0.25 / p["size"] if op == "average" else 0.25)  # postscale 0.25
        assert p["post"] == want, p
