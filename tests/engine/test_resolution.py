"""Ranked resolution over the catalog's prebuilt matrix: scenarios, properties, JSON shape."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selector_backend.engine import compat
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import Candidate, ideal_variant, resolve
from selector_backend.engine.sources import catalog_matrix
from selector_backend.engine.variant import format_variant
from selector_backend.errors import InputError

from .engine_helpers import make_host

HOSTS = [
    "icelake",
    "zen3",
    "zen2",
    "ivybridge",
    "haswell",
    "sapphirerapids",
    "neoverse_v2",
    "neoverse_v1",
    "neoverse_n1",
    "a64fx",
    "x86_64",
    "aarch64",
    "skylake_avx512",
]
CCS = ["6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
DRIVERS = [None, "12.2", "12.4", "12.8", "13.0"]
SELECTORS = ["auto", "cpu", "gpu-nvidia", "tensor_ops=gloo", "tensor_ops=mpi", "cuda=12", "auto target=x86_64_v3"]


def run(catalog: Any, host: Any, selector: str = "auto") -> Any:
    return resolve(host, list(catalog_matrix(catalog)), catalog, parse_selector(selector, catalog))


def sel(resolution: Any) -> str | None:
    return None if resolution.selected is None else format_variant(resolution.selected.variant)


# ------------------------------------------------------------------ scenarios
def test_cpu_only_avx512_host_gets_the_most_specific_gloo_build(catalog: Any) -> None:
    r = run(catalog, make_host("icelake"))
    assert r.selected is not None
    assert r.selected.variant["target"] == "x86_64_v4"
    assert r.selected.variant["tensor_ops"] == "gloo"
    assert r.selected.variant["cuda"] == "none"


def test_mpich_host_prefers_the_mpi_build_and_openmpi_host_does_not(catalog: Any) -> None:
    assert run(catalog, make_host("zen3", mpi="mpich")).selected.variant["tensor_ops"] == "mpi"
    assert run(catalog, make_host("zen3", mpi="mpich")).selected.variant["target"] == "x86_64_v3"
    r = run(catalog, make_host("zen3", mpi="openmpi"), "tensor_ops=mpi")
    assert r.selected is None
    assert r.source_build is not None and r.source_build["tensor_ops"] == "mpi"


def test_ivybridge_gets_only_the_baseline(catalog: Any) -> None:
    r = run(catalog, make_host("ivybridge"))
    assert r.selected.variant["target"] == "x86_64"
    assert all(c.variant["target"] == "x86_64" for c in r.candidates if c.compatible)


def test_neoverse_v1_never_gets_the_neoverse_v2_build(catalog: Any) -> None:
    r = run(catalog, make_host("neoverse_v1", gpus=["9.0"], driver="13.0"))
    assert r.selected.variant["target"] == "neoverse_v1"
    assert r.selected.variant["cuda"] == "none"
    v2 = [c for c in r.candidates if c.variant["target"] == "neoverse_v2"]
    assert v2 and not any(c.compatible for c in v2)
    assert any("not an ancestor of host neoverse_v1" in x for c in v2 for x in c.reasons)


def test_a100_with_cuda_12_4_driver_gets_cuda12_sm80(catalog: Any) -> None:
    r = run(catalog, make_host("zen3", gpus=["8.0"] * 8, driver="12.4"))
    assert sel(r) == "target=x86_64_v3 cuda=12 cuda_arch=80 tensor_ops=nccl controllers=gloo frameworks=pytorch"
    cuda13 = [c for c in r.candidates if c.variant["cuda"] == "13"]
    assert all(not c.compatible for c in cuda13)
    assert all(any("driver supports only CUDA 12.4" in x for x in c.reasons) for c in cuda13)


def test_h100_prefers_the_newer_cuda_line_when_the_driver_allows(catalog: Any) -> None:
    old = run(catalog, make_host("sapphirerapids", gpus=["9.0"], driver="12.8"))
    assert (old.selected.variant["cuda"], old.selected.variant["cuda_arch"]) == ("12", ("90",))
    new = run(catalog, make_host("sapphirerapids", gpus=["9.0"], driver="13.0"))
    assert (new.selected.variant["cuda"], new.selected.variant["cuda_arch"]) == ("13", ("90",))


@pytest.mark.parametrize(
    ("cc", "driver", "cuda", "arch"),
    [
        ("8.6", "13.0", "13", "86"),  # RTX A6000: the exact sm_86 build, not sm_80 run on 8.6
        ("8.9", "13.0", "13", "89"),  # L4 / RTX 4090
        ("8.6", "12.4", "12", "80"),  # CUDA 12 line has no sm_86: the sm_80 image
        ("10.0", "12.8", "12", "90"),  # B200 on an old driver: PTX of compute_90, not compute_70
        ("10.0", "13.0", "13", "100"),
        ("12.0", "13.0", "13", "120"),
    ],
)
def test_the_code_closest_to_the_gpu_wins(catalog: Any, cc: str, driver: str, cuda: str, arch: str) -> None:
    r = run(catalog, make_host("zen3", gpus=[cc], driver=driver))
    assert (r.selected.variant["cuda"], r.selected.variant["cuda_arch"]) == (cuda, (arch,))


def test_grace_hopper_gets_the_aarch64_gpu_build(catalog: Any) -> None:
    r = run(catalog, make_host("neoverse_v2", gpus=["9.0"], driver="13.0"))
    assert sel(r) == "target=neoverse_v2 cuda=13 cuda_arch=90 tensor_ops=nccl controllers=gloo frameworks=pytorch"


def test_mixed_host_takes_sass_plus_ptx_and_the_source_build_serves_both(catalog: Any) -> None:
    host = make_host("icelake", gpus=["7.5", "8.6"], driver="12.6")
    r = run(catalog, host)
    assert r.selected.variant["cuda_arch"] == ("70",)
    assert any("PTX JIT of compute_70" in x for x in r.selected.reasons)
    assert r.source_build["cuda"] == "12"
    assert r.source_build["cuda_arch"] == ("75", "86")


def test_gtx1080_gets_a_loud_cpu_fallback_under_auto_and_fails_when_gpu_is_required(catalog: Any) -> None:
    host = make_host("skylake", gpus=["6.1"], driver="12.2")
    auto = run(catalog, host)
    assert auto.selected.variant["cuda"] == "none"
    assert auto.notes[0].startswith("WARNING: this host has 1 NVIDIA GPU(s)")
    assert "cuda=12 cuda_arch=61" in auto.notes[0]
    gpu = run(catalog, host, "gpu-nvidia")
    assert gpu.selected is None
    # minor-version compatibility: a 12.2 driver runs a CUDA 12.4 build, so the exact
    # source build targets sm_61 (before, the rule wrongly asked for a 12.4 driver)
    assert gpu.source_build["cuda_arch"] == ("61",) and gpu.source_build["cuda"] == "12"
    older = run(catalog, host._replace(cuda_driver="11.8"), "gpu-nvidia")
    assert older.selected is None and older.source_build is None
    assert any("no source build is possible" in n for n in older.notes)


def test_selector_pins_restrict_and_explain(catalog: Any) -> None:
    r = run(catalog, make_host("icelake"), "target=x86_64_v3")
    assert r.selected.variant["target"] == "x86_64_v3"
    off = [c for c in r.candidates if c.variant["target"] == "x86_64_v4"]
    assert any("selector pins target=x86_64_v3; candidate has x86_64_v4" in x for c in off for x in c.reasons)
    cpu = run(catalog, make_host("icelake", gpus=["8.0"], driver="12.4"), "cpu")
    assert cpu.selected.variant["cuda"] == "none"


def test_selector_errors_suggest(catalog: Any) -> None:
    with pytest.raises(InputError, match=r"did you mean gpu-nvidia\?"):
        parse_selector("gpu-nvida", catalog)
    with pytest.raises(InputError, match=r"did you mean nccl\?"):
        parse_selector("tensor_ops=ncl", catalog)
    with pytest.raises(InputError, match="contradicts"):
        parse_selector("cpu cuda=12", catalog)


def test_failing_reasons_come_first(catalog: Any) -> None:
    r = run(catalog, make_host("ivybridge"))
    for c in r.candidates:
        assert c.reasons  # every candidate says something
        if not c.compatible:
            # the first reason is one that fails: re-evaluating agrees
            failing = set(compat.failures(compat.check_variant(c.variant, catalog, make_host("ivybridge"))))
            failing |= {f.reason for f in parse_selector("auto", catalog).check(c.variant) if not f.ok}
            assert c.reasons[0] in failing


# ------------------------------------------------------------------ properties
hosts = st.builds(
    make_host,
    microarch=st.sampled_from(HOSTS),
    gpus=st.lists(st.sampled_from(CCS), max_size=3),
    driver=st.sampled_from(DRIVERS),
    mpi=st.sampled_from([None, "mpich", "openmpi"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=hosts, selector=st.sampled_from(SELECTORS))
def test_selected_is_compatible_and_the_best(catalog: Any, host: Any, selector: str) -> None:
    r = run(catalog, host, selector)
    compatible = [c for c in r.candidates if c.compatible]
    assert r.candidates[: len(compatible)] == tuple(compatible)  # compatible ones lead
    if r.selected is None:
        assert not compatible
        return
    assert r.selected is r.candidates[0]
    parsed = parse_selector(selector, catalog)
    findings = compat.check_variant(r.selected.variant, catalog, host) + parsed.check(r.selected.variant)
    assert compat.compatible(findings), findings
    if r.selected.variant["cuda"] == "none":
        # a CPU pick on a host with a servable GPU happens only when no GPU build fits
        assert not any(c.compatible and c.variant["cuda"] != "none" for c in r.candidates)
        return
    # no fitting GPU build of the same library and support level runs code closer to the GPUs
    best = r.selected.variant
    level = compat.worst_cuda_support(best.values_of("cuda_arch"), host)
    for c in compatible:
        v = c.variant
        if v["cuda"] == "none" or v["tensor_ops"] != best["tensor_ops"]:
            continue
        if compat.worst_cuda_support(v.values_of("cuda_arch"), host) == level:
            code = compat.cuda_code_used(v.values_of("cuda_arch"), host)
            assert code <= compat.cuda_code_used(best.values_of("cuda_arch"), host)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=hosts, data=st.data())
def test_ranking_is_deterministic_and_independent_of_input_order(catalog: Any, host: Any, data: Any) -> None:
    candidates = list(catalog_matrix(catalog))
    shuffled = data.draw(st.permutations(candidates))
    selector = parse_selector("auto", catalog)
    a = resolve(host, candidates, catalog, selector)
    b = resolve(host, shuffled, catalog, selector)
    again = resolve(host, candidates, catalog, selector)
    assert a.to_json() == again.to_json()
    ok_a = [format_variant(c.variant) for c in a.candidates if c.compatible]
    ok_b = [format_variant(c.variant) for c in b.candidates if c.compatible]
    assert ok_a == ok_b
    assert {format_variant(c.variant) for c in a.candidates} == {format_variant(c.variant) for c in b.candidates}
    assert a.source_build == b.source_build


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=hosts, selector=st.sampled_from(["auto", "cpu", "tensor_ops=gloo"]))
def test_ideal_variant_is_buildable_and_runs_on_the_host(catalog: Any, host: Any, selector: str) -> None:
    parsed = parse_selector(selector, catalog)
    variant = ideal_variant(host, catalog, parsed)
    assert catalog.violations(variant) == []
    findings = compat.check_variant(variant, catalog, host) + parsed.check(variant)
    # a source build links the host's own MPI: ignore the prebuilt-ABI rule
    findings = [f for f in findings if "prebuilt MPI builds" not in f.reason]
    assert compat.compatible(findings), findings


# ------------------------------------------------------------------ JSON contract
_VARIANT_SCHEMA = {
    "type": "object",
    "required": ["target", "cuda", "cuda_arch", "tensor_ops", "controllers", "frameworks"],
    "properties": {
        "target": {"type": "string"},
        "cuda": {"type": "string"},
        "tensor_ops": {"type": "string"},
        "cuda_arch": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "controllers": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "frameworks": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "additionalProperties": False,
}
_RANKED = {
    "type": "object",
    "required": ["variant", "compatible", "reasons"],
    "properties": {
        "variant": _VARIANT_SCHEMA,
        "compatible": {"type": "boolean"},
        "reasons": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
}
RESOLUTION_SCHEMA = {
    "type": "object",
    "required": ["selected", "candidates"],
    "properties": {
        "selected": {"anyOf": [{"type": "null"}, _RANKED]},
        "candidates": {"type": "array", "items": _RANKED},
    },
}


@pytest.mark.parametrize(
    ("host", "selector"),
    [
        (make_host("icelake"), "auto"),
        (make_host("icelake", gpus=["7.5", "8.6"], driver="12.6"), "auto"),
        (make_host("skylake", gpus=["6.1"], driver="12.2"), "gpu-nvidia"),  # selected: null
    ],
)
def test_resolution_json_matches_the_contract(catalog: Any, host: Any, selector: str) -> None:
    r = run(catalog, host, selector)
    data = json.loads(json.dumps(r.to_json()))
    jsonschema.validate(data, RESOLUTION_SCHEMA)
    assert len(data["candidates"]) == len(catalog.prebuilt_variants())
    if r.selected is not None:
        assert data["selected"] == data["candidates"][0]
        assert data["selected"]["compatible"] is True
    for cand in data["candidates"]:
        # the JSON variant parses back to the very variant that was ranked
        assert catalog.parse_variant(cand["variant"]).to_json() == cand["variant"]


def test_candidate_extra_reaches_the_json(catalog: Any) -> None:
    variant = catalog.prebuilt_variants()[0]
    extra = {"url": "http://127.0.0.1/x.whl", "sha256": "0" * 64}
    r = resolve(make_host(), [Candidate(variant, "index", extra)], catalog, parse_selector(None, catalog))
    out = r.to_json()["selected"]
    assert out["source"] == "index" and out["url"] == extra["url"] and out["sha256"] == extra["sha256"]


def test_source_specific_findings_can_veto(catalog: Any) -> None:
    variant = catalog.prebuilt_variants()[0]
    veto = Candidate(variant, "spack", findings=(compat.Finding(False, "os rhel9 is not the host's"),))
    r = resolve(make_host(), [veto], catalog, parse_selector(None, catalog))
    assert r.selected is None and r.candidates[0].reasons[0] == "os rhel9 is not the host's"
