"""A GPU install's set (variant + the NCCL wheel its extra brings) works on the driver it was chosen for.

Host profiles for drivers 12.2, 12.9 and 13.0 (A100, an AVX2 CPU): resolve the
catalog's prebuilt matrix (and the source-build variant when it is a GPU one), take the
extra the backend names for it, read what that extra brings from pyproject.toml,
and check the pair with the same rule doctor uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.engine.nccl_pairing import NCCL_WHEEL, extra_for, pair_problems
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import ideal_variant, resolve
from selector_backend.engine.sources import catalog_matrix
from selector_backend.files.tomlfile import load_toml

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = load_toml(ROOT / "pyproject.toml").data["project"]["optional-dependencies"]


def host(driver: str) -> HostProfile:
    return HostProfile.from_json(
        {
            "platform": "linux",
            "machine": "x86_64",
            "cpu": {"microarch": "zen3"},
            "gpus": [{"vendor": "nvidia", "name": "A100", "compute_capability": "8.0"}],
            "cuda_driver": driver,
        }
    )


def brought_by(extra: str) -> list[str]:
    return [Requirement(r).name for r in EXTRAS[extra]]


@pytest.mark.parametrize(("driver", "line"), [("12.2", "12"), ("12.9", "12"), ("13.0", "13")])
def test_installed_set_is_a_working_pair(driver: str, line: str) -> None:
    catalog = load_catalog()
    profile = host(driver)
    selector = parse_selector("auto", catalog)
    chosen = resolve(profile, catalog_matrix(catalog), catalog, selector).selected
    assert chosen is not None
    source = ideal_variant(profile, catalog, selector)
    # The source build's driver rule belongs to the resolver (it may pick CPU below the line's
    # toolkit); whatever GPU build it picks must pair too.
    for variant in (chosen.variant, *([source] if source["tensor_ops"] == "nccl" else [])):
        assert variant["tensor_ops"] == "nccl" and str(variant["cuda"]) == line, variant
        extra = extra_for(variant)
        assert extra == f"gpu-nvidia-cu{line}"
        nccl = brought_by(extra)
        assert nccl == [NCCL_WHEEL[line]]
        assert pair_problems(variant, nccl, driver) == []


def test_gpu_nvidia_brings_no_nccl_of_a_fixed_line() -> None:
    """The old [gpu-nvidia] -> nvidia-nccl-cu13 broke every cuda=12 install on a 12.x driver."""
    assert not any(name.startswith("nvidia-nccl") for name in brought_by("gpu-nvidia"))
    catalog = load_catalog()
    cuda12 = catalog.parse_variant("target=x86_64_v3 cuda=12 cuda_arch=80 tensor_ops=nccl", fill_defaults=True)
    problems = pair_problems(cuda12, ["nvidia-nccl-cu13"], "12.2")
    assert any("needs nvidia-nccl-cu12" in p.reason and p.add_extra == "gpu-nvidia-cu12" for p in problems)
    assert any("driver for CUDA 13.0" in p.reason for p in problems)
    assert any(p.uninstall == "nvidia-nccl-cu13" for p in problems)
    assert [p.add_extra for p in pair_problems(cuda12, [], "12.2")] == ["gpu-nvidia-cu12"]


def test_cpu_builds_need_no_nccl() -> None:
    catalog = load_catalog()
    cpu = catalog.parse_variant("target=x86_64_v3", fill_defaults=True)
    assert extra_for(cpu) is None and pair_problems(cpu, [], None) == []
