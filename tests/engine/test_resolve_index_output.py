"""``resolve --index-url`` on a generated index: the JSON lists each variant once with its wheels,
``--explain`` shows a candidate's wheels, and the summary counts candidates and wheels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.synthetic_index import write_index

from .engine_helpers import Cli, make_host

VARIANTS = 40  # x 4 Python tags: 160 wheels


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, catalog: Any) -> tuple[str, int]:
    simple, wheels = write_index(tmp_path_factory.mktemp("index"), catalog, VARIANTS)
    return simple.as_uri(), wheels


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "host.json"  # an x86_64 icelake with cp311 on glibc 2.39: the cp311 manylinux_2_28 wheels fit
    path.write_text(json.dumps(make_host("icelake").to_json()))
    return path


def test_json_lists_each_variant_once_with_its_wheels(cli: Cli, index: tuple[str, int], profile: Path) -> None:
    url, wheels = index
    result = cli("resolve", "--json", "--host-profile", str(profile), "--index-url", url)
    assert result.rc == 0, result
    data = json.loads(result.out)
    candidates = data["candidates"]
    assert len(candidates) == VARIANTS
    assert len({c["label"] for c in candidates}) == VARIANTS
    assert sum(len(c["files"]) for c in candidates) == wheels
    assert all(c["label"] in f["filename"] and f["url"].endswith(f["filename"]) for c in candidates for f in c["files"])
    fitting = [c for c in candidates if c["compatible"]]
    assert fitting and candidates[: len(fitting)] == fitting  # the fitting ones lead
    for cand in candidates:
        verdicts = [f["compatible"] for f in cand["files"]]
        assert verdicts == sorted(verdicts, reverse=True)  # a candidate's fitting wheels come first
        assert cand["compatible"] == any(verdicts)
        assert all(len(f["reasons"]) == 1 and f["reasons"][0].startswith("wheel tag ") for f in cand["files"])
    best = candidates[0]["files"][0]
    assert "cp311-cp311" in best["filename"]
    selected = data["selected"]
    fields = ("filename", "url", "sha256")
    assert {k: selected[k] for k in fields} == {k: best[k] for k in fields}
    assert selected["label"] == candidates[0]["label"] and selected["variant"] == candidates[0]["variant"]
    assert sorted(selected["reasons"]) == sorted(candidates[0]["reasons"] + best["reasons"])


def test_explain_shows_a_candidates_wheels(cli: Cli, index: tuple[str, int], profile: Path) -> None:
    url, _ = index
    ranked = json.loads(cli("resolve", "--json", "--host-profile", str(profile), "--index-url", url).out)["candidates"]
    result = cli("resolve", "--explain", "--host-profile", str(profile), "--index-url", url)
    assert result.rc == 0, result
    lines = result.out.splitlines()
    assert lines[0].startswith("  1. ok ") and lines[0].endswith("<= selected")
    first = ranked[0]["files"]
    assert f"          wheel {first[0]['filename']}: ok, {first[0]['reasons'][0]}" in lines
    assert f"          wheel {first[3]['filename']}: no, {first[3]['reasons'][0]}" not in lines  # the 4th is hidden
    assert "          ... 1 more wheel(s), 0 of them fit; --explain --all lists every one" in lines
    assert f"  ... {VARIANTS - 10} more candidates" in result.out
    every = cli("resolve", "--explain", "--all", "--host-profile", str(profile), "--index-url", url).out.splitlines()
    assert f"          wheel {first[3]['filename']}: no, {first[3]['reasons'][0]}" in every
    assert sum(line.startswith("          wheel ") for line in every) == sum(len(c["files"]) for c in ranked)
    # A wheel of a variant that does not fit: "no" beside its passing tag check says why it is no.
    unfit = [f for c in ranked if not c["compatible"] for f in c["files"] if "is supported by" in f["reasons"][0]]
    assert unfit
    for file in unfit:
        assert f"          wheel {file['filename']}: no (the variant does not fit), {file['reasons'][0]}" in every


def test_summary_counts_candidates_and_wheels(cli: Cli, index: tuple[str, int], profile: Path) -> None:
    url, wheels = index
    ranked = json.loads(cli("resolve", "--json", "--host-profile", str(profile), "--index-url", url).out)["candidates"]
    result = cli("resolve", "--host-profile", str(profile), "--index-url", url)
    assert result.rc == 0, result
    fit = [c for c in ranked if c["compatible"]]
    wheels_fit = sum(f["compatible"] for c in ranked for f in c["files"])
    assert f"{len(fit)} of {VARIANTS} candidates fit ({wheels_fit} of {wheels} wheels)" in result.out
