"""Fleet planning: fewest variants, each host's best, and the matrix restricted to a plan."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector_backend.cli.main import main
from selector_backend.engine import resolve
from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.variant import Variant
from selector_backend.publishing import fleet as planning

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"
FLEET = Path(__file__).resolve().parents[2] / "examples" / "fleet.json"  # the fleet the docs plan


def by_host(result: planning.Plan) -> dict[str, str | None]:
    return {
        a.host: (
            None
            if a.variant is None
            else " ".join(
                f"{k}={','.join(a.variant.values_of(k))}" for k in ("target", "cuda", "cuda_arch", "tensor_ops")
            )
        )
        for a in result.assignments
    }


def test_exact_plan_merges_hosts_that_differ_only_in_gpu_arch() -> None:
    catalog = load_catalog()
    result = planning.make_plan(planning.load_fleet(FLEET), catalog, parse_selector(None, catalog))
    hosts = by_host(result)
    merged = "target=x86_64_v3 cuda=13 cuda_arch=80,89,90 tensor_ops=nccl"
    assert hosts["a100-node"] == hosts["h100-node"] == hosts["mixed-node"] == merged
    assert hosts["v100-node"] == "target=x86_64_v4 cuda=12 cuda_arch=70 tensor_ops=nccl", "driver 12.4: CUDA 12"
    assert hosts["gh200-node"] == "target=neoverse_v2 cuda=13 cuda_arch=90 tensor_ops=nccl"
    assert hosts["cpu-mpi"] == "target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=mpi"
    assert hosts["old-cpu"] == "target=x86_64_v2 cuda=none cuda_arch=none tensor_ops=gloo"
    assert hosts["power9"] is None
    assert len(result.variants) == 6
    # Each host's planned variant is exactly as good as its own exact build.
    fleet = dict(planning.load_fleet(FLEET))
    for a in result.assignments:
        if a.variant is not None:
            ideal = planning._best_exact(fleet[a.host], catalog, result.selector)
            assert planning.quality(a.variant, catalog, fleet[a.host]) == planning.quality(
                ideal, catalog, fleet[a.host]
            )


def test_matrix_plan_is_the_smallest_subset_of_the_prebuilt_matrix() -> None:
    catalog = load_catalog()
    fleet = planning.load_fleet(FLEET)
    result = planning.make_plan(fleet, catalog, parse_selector(None, catalog), "matrix")
    assert set(result.variants) <= set(catalog.prebuilt_variants())
    hosts = by_host(result)
    assert hosts["a100-node"] == hosts["mixed-node"], "sm_80 SASS runs on the 8.9 GPU too"
    assert hosts["h100-node"].endswith("cuda_arch=90 tensor_ops=nccl")
    assert len(result.variants) == 7
    # Nothing smaller works: drop any one variant and some host loses its best.
    for dropped in result.variants:
        rest = [v for v in result.variants if v != dropped]
        assert not all(
            any(
                planning.quality(v, catalog, h) == planning.quality(a.variant, catalog, h)
                and planning.runs_on(v, catalog, h, result.selector)
                for v in rest
            )
            for (_name, h), a in zip(fleet, result.assignments, strict=True)
            if a.variant is not None
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 7), min_size=1), min_size=1, max_size=8))
def test_smallest_cover_is_minimal_and_covers(needs_raw: list[set[int]]) -> None:
    universe = [Variant({"v": str(i)}) for i in range(8)]
    needs = {f"h{i}": {universe[j] for j in s} for i, s in enumerate(needs_raw)}
    chosen = planning.smallest_cover(universe, needs)
    assert all(any(v in needs[h] for v in chosen) for h in needs)
    greedy = planning.cover(universe, needs)
    assert len(chosen) <= len(greedy)


def test_plan_json_golden_and_matrix_restricted_to_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", str(FLEET), "--json", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    golden = GOLDEN / "fleet-plan.json"
    if os.environ.get("HVD_SELECTOR_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text() == out.read_text()
    assert main(["matrix", "--plan", str(out), "--format", "json"]) == 0
    jobs = json.loads(capsys.readouterr().out)
    planned = json.loads(text)["variants"]
    assert [j["variant"] for j in jobs] == [v["variant"] for v in planned]
    assert [j["entry"] for j in jobs] == [v["prebuilt"] or "plan" for v in planned]


def test_bad_fleets_and_plans_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "[]": "the fleet lists no hosts",
        "{": "not valid JSON",
        '[{"platform": "linux", "colour": "blue"}]': "colour",
    }
    for text, message in cases.items():
        path = tmp_path / "fleet.json"
        path.write_text(text)
        assert main(["plan", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    empty = tmp_path / "empty-plan.json"
    empty.write_text('{"variants": []}')
    assert main(["matrix", "--plan", str(empty)]) == 2
    assert "selects no variant; nothing to build" in capsys.readouterr().err
    wrong = tmp_path / "wrong-plan.json"
    wrong.write_text('{"variants": [{"variant": {"target": "x86_64_v9"}}]}')
    assert main(["matrix", "--plan", str(wrong)]) == 2
    assert "variants[0]: unknown value 'x86_64_v9'" in capsys.readouterr().err


def test_quality_ignores_only_arch_list_size_and_order() -> None:
    """plan.quality is the RankKey without its arch-list size (read by field name)."""
    catalog = load_catalog()
    fleet = dict(planning.load_fleet(FLEET))
    a100 = fleet["a100-node"]
    thin = catalog.parse_variant(
        "target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=gloo", fill_defaults=True
    )
    wide = catalog.parse_variant(
        "target=x86_64_v3 cuda=13 cuda_arch=80,90 tensor_ops=nccl controllers=gloo", fill_defaults=True
    )
    v4 = catalog.parse_variant(
        "target=x86_64_v4 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=gloo", fill_defaults=True
    )
    assert planning.quality(thin, catalog, a100) == planning.quality(wide, catalog, a100)
    assert resolve.variant_rank(thin, catalog, a100) < resolve.variant_rank(wide, catalog, a100)
    login = fleet["cpu-login"]  # icelake: x86_64_v4 is better than x86_64_v3 there
    cpu3 = catalog.parse_variant("target=x86_64_v3 tensor_ops=gloo controllers=gloo", fill_defaults=True)
    cpu4 = catalog.parse_variant("target=x86_64_v4 tensor_ops=gloo controllers=gloo", fill_defaults=True)
    assert planning.quality(cpu4, catalog, login) < planning.quality(cpu3, catalog, login)
    assert planning.quality(v4, catalog, a100) != planning.quality(thin, catalog, a100)
