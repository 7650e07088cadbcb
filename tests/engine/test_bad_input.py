"""Bad input through the real CLI: one line naming the problem, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .engine_helpers import ROOT

CATALOG = (ROOT / "variants" / "catalog.toml").read_text(encoding="utf-8")

# (id, text to replace, replacement, message fragment, text on the line the error must name)
CATALOG_CASES = [
    (
        "unknown-axis-in-constraint",
        'when = { tensor_ops = "nccl" }',
        'when = { tensor_opz = "nccl" }',
        "unknown axis 'tensor_opz' (did you mean tensor_ops?)",
        "tensor_opz",
    ),
    (
        "unknown-axis-in-prebuilt",
        'name = "cpu-mpi-x86_64"\n',
        'name = "cpu-mpi-x86_64"\ncolour = "blue"\n',
        "unknown axis 'colour'",
        "colour",
    ),
    (
        "bad-value",
        'target = ["x86_64_v3", "x86_64_v4"]',
        'target = ["x86_64_v3", "x86_64_v5"]',
        "unknown value 'x86_64_v5' for axis target (did you mean x86_64_v4?)",
        "x86_64_v5",
    ),
    (
        "bad-preference-value",
        'tensor_ops = ["nccl", "mpi", "gloo"]',
        'tensor_ops = ["nccl", "mpl", "gloo"]',
        "'mpl' is not a value of tensor_ops (did you mean mpi?)",
        '"mpl"',
    ),
    (
        "contradictory-constraint",
        'when = { tensor_ops = "nccl" }\nforbid = { cuda = "none" }',
        'when = { tensor_ops = "nccl" }\nrequire = { cuda = "none" }\nforbid = { cuda = "none" }',
        "contradictory constraint",
        "[[constraints]]",
    ),
    (
        "prebuilt-arch-the-cuda-line-cannot-build",
        'cuda_arch = ["70", "80", "90"]',
        'cuda_arch = ["70", "80", "90", "100"]',
        "CUDA 12 cannot build cuda_arch 100",
        "[[prebuilt]]",
    ),
    (
        "prebuilt-breaks-a-constraint",
        'tensor_ops = "gloo"\ncontrollers = "gloo"\nframeworks = "pytorch"\n\n[[prebuilt]]\nname = "cpu-mpi-x86_64"',
        'tensor_ops = "gloo"\ncontrollers = "mpi"\nframeworks = "pytorch"\n\n[[prebuilt]]\nname = "cpu-mpi-x86_64"',
        "tensor_ops=gloo needs the gloo controller",
        "[[prebuilt]]",
    ),
    (
        "family-lie",
        'aarch64 = ["aarch64", "neoverse_n1", "neoverse_v1", "neoverse_v2"]',
        'aarch64 = ["aarch64", "neoverse_n1", "neoverse_v1", "neoverse_v2", "x86_64_v4"]',
        "target x86_64_v4 is an x86_64 target (archspec), not aarch64",
        "aarch64 = [",
    ),
    (
        "unknown-top-level-key",
        "[builds]\n",
        "[build]\nx = 1\n\n[builds]\n",
        "unknown top-level key 'build' (did you mean builds?)",
        "[build]",
    ),
    (
        "toml-syntax-error",
        'name = "hvd-selector"',
        'name = "hvd-selector',
        "invalid TOML",
        'name = "hvd-selector',
    ),
]


def line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line.split("#", 1)[0]:
            return number
    raise AssertionError(f"{needle!r} not in the catalog")


@pytest.mark.parametrize(
    ("old", "new", "message", "marker"), [c[1:] for c in CATALOG_CASES], ids=[c[0] for c in CATALOG_CASES]
)
def test_malformed_catalog(cli: Any, tmp_path: Path, old: str, new: str, message: str, marker: str) -> None:
    assert CATALOG.count(old) >= 1, f"catalog changed: {old!r} not found"
    text = CATALOG.replace(old, new, 1)
    path = tmp_path / "catalog.toml"
    path.write_text(text, encoding="utf-8")
    result = cli("resolve", "--catalog", str(path), "--host-profile", str(tmp_path / "unused.json"))
    assert result.rc == 2, result
    line = result.one_line_error()
    assert message in line, line
    if "invalid TOML" in message:
        # tomllib names the line itself: "(at line N, column M)"
        assert f"{path}: invalid TOML" in line and f"line {line_of(text, marker)}" in line, line
    else:
        expected_line = line_of(text[text.index(new[:20]) :], marker) + text[: text.index(new[:20])].count("\n")
        if marker == "[[constraints]]" or marker == "[[prebuilt]]":
            # the entry's header: the last header line before the change
            head = text[: text.index(new[:20])]
            expected_line = head.rfind(marker)
            expected_line = head[:expected_line].count("\n") + 1
        assert f"{path}:{expected_line}: " in line, (line, expected_line)


def test_missing_catalog_file(cli: Any, tmp_path: Path) -> None:
    result = cli("resolve", "--catalog", str(tmp_path / "nope.toml"))
    assert result.rc == 2
    assert "nope.toml: cannot read" in result.one_line_error()


# ------------------------------------------------------------------ environment
ENV_CASES = [
    ({"HVD_SELECTOR_SELECTOR": "gpu-nvida"}, "unknown selector 'gpu-nvida' (did you mean gpu-nvidia?)"),
    ({"HVD_SELECTOR": "gpu-nvida"}, "did you mean gpu-nvidia?"),
    ({"HVD_SELECTOR_SELECTOR": "tensor_ops=ncl"}, "unknown value 'ncl' for axis tensor_ops (did you mean nccl?)"),
    ({"HVD_SELECTOR_SELECTOR": "cuda_arhc=80"}, "unknown axis 'cuda_arhc' (did you mean cuda_arch?)"),
    ({"HVD_SELECTOR_TARGET": "zen33"}, "HVD_SELECTOR_TARGET: unknown CPU target 'zen33' (did you mean zen3?)"),
    ({"HVD_SELECTOR_GPUS": "abc"}, "HVD_SELECTOR_GPUS: compute capability 'abc' is not like 8.0"),
    ({"HVD_SELECTOR_CUDA_DRIVER": "twelve"}, "HVD_SELECTOR_CUDA_DRIVER: cuda driver 'twelve' is not a version"),
    ({"HVD_SELECTOR_MPI": "mpitch 4.2"}, "did you mean mpich?"),
    ({"HVD_SELECTOR_OFFLINE": "maybe"}, "HVD_SELECTOR_OFFLINE: offline='maybe' is not a boolean"),
    ({"HVD_SELECTOR_BUILD_POLICY": "prefer-prebuild"}, "did you mean prefer-prebuilt?"),
    ({"HVD_SELECTOR_FOO": "1"}, "unknown environment variable HVD_SELECTOR_FOO"),
    ({"HVD_SELECTOR_GPU": "8.0"}, "unknown environment variable HVD_SELECTOR_GPU (did you mean HVD_SELECTOR_GPUS?)"),
    ({"HVD_SELECTOR_OS": "Ubuntu 24.04", "HVD_SELECTOR_PYTHON": "3.11"}, "HVD_SELECTOR_PYTHON: python '3.11'"),
]


@pytest.mark.parametrize(
    ("env", "message"), ENV_CASES, ids=[next(iter(e)) + "=" + next(iter(e.values())) for e, _ in ENV_CASES]
)
def test_bad_environment_value(cli: Any, env: dict[str, str], message: str) -> None:
    result = cli("resolve", env=env)
    assert result.rc == 2, result
    assert message in result.one_line_error()
    assert result.out == ""


def test_bad_cli_usage(cli: Any) -> None:
    assert cli("resolve", "--no-such-flag").rc == 2
    assert cli("no-such-command").rc == 2
    bad_c = cli("resolve", "-C", "slector=cpu")
    assert bad_c.rc == 2 and "unknown config setting -C slector (did you mean selector?)" in bad_c.one_line_error()
    no_eq = cli("resolve", "-C", "selector")
    assert no_eq.rc == 2 and "expected KEY=VALUE" in no_eq.one_line_error()
    both = cli("resolve", "--json", "--explain")
    assert both.rc == 2 and "not allowed with" in both.err
