"""A variant with its wheels as one Candidate ranks exactly as one Candidate per wheel would,
its JSON lists the variant once with its wheels under it in that same order, and
``to_json_text`` is ``json.dumps(to_json())`` byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selector_backend.engine import compat
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import Candidate, CandidateFile, RankedCandidate, resolve

from .engine_helpers import make_host

TAGS = ["cp310", "cp311", "cp312"]  # listed tag-major, as a sorted index page lists them


def wheels(catalog: Any) -> list[tuple[int, Any, str, str, compat.Finding]]:
    """(position, variant, label, tag, wheel-tag finding) in page order: every variant twice
    (two releases), one wheel per tag, the tags interleaved across variants."""
    variants = catalog.prebuilt_variants()
    out = []
    for tag in TAGS:
        for release in ("1", "2"):
            for number, variant in enumerate(variants):
                finding = compat.Finding(tag == "cp311", f"wheel tag {tag} {'fits' if tag == 'cp311' else 'does not'}")
                out.append((len(out), variant, f"{release}v{number}", tag, finding))
    return out


def per_wheel(catalog: Any) -> list[Candidate]:
    return [
        Candidate(
            variant,
            "index",
            {
                "filename": f"{label}-{tag}.whl",
                "url": f"http://127.0.0.1/{label}-{tag}.whl",
                "sha256": f"{position:064x}",
                "label": label,
            },
            (finding,),
            order=TAGS.index(tag) if finding.ok else 10**9,
        )
        for position, variant, label, tag, finding in wheels(catalog)
    ]


def grouped(catalog: Any) -> list[Candidate]:
    groups: dict[str, tuple[Any, list[CandidateFile]]] = {}
    for position, variant, label, tag, finding in wheels(catalog):
        files = groups.setdefault(label, (variant, []))[1]
        order = TAGS.index(tag) if finding.ok else 10**9
        name = f"{label}-{tag}.whl"
        files.append(CandidateFile(name, f"http://127.0.0.1/{name}", f"{position:064x}", (finding,), order, position))
    return [Candidate(v, "index", {"label": label}, files=tuple(f)) for label, (v, f) in groups.items()]


@pytest.mark.parametrize(
    ("host", "selector"),
    [
        (make_host("icelake"), "auto"),
        (make_host("icelake", gpus=["7.5", "8.6"], driver="12.6"), "auto"),
        (make_host("skylake", gpus=["6.1"], driver="12.2"), "gpu-nvidia"),  # nothing fits
        (make_host("zen3", mpi="mpich"), "cpu"),
    ],
)
def test_grouped_wheels_rank_as_single_wheels(catalog: Any, host: Any, selector: str) -> None:
    chosen = parse_selector(selector, catalog)
    one_by_one = resolve(host, per_wheel(catalog), catalog, chosen)
    together = resolve(host, grouped(catalog), catalog, chosen)
    assert [r.reasons for r in together.candidates] == [r.reasons for r in one_by_one.candidates]
    assert [r.compatible for r in together.candidates] == [r.compatible for r in one_by_one.candidates]
    assert [r.candidate for r in together.candidates] == [r.candidate for r in one_by_one.candidates]
    assert together.notes == one_by_one.notes
    if together.selected is not None:
        assert together.selected is together.candidates[0]
        assert together.to_json()["selected"] == one_by_one.to_json()["selected"]
    else:
        assert one_by_one.selected is None


@pytest.mark.parametrize(
    "host",
    [make_host("icelake"), make_host("icelake", gpus=["8.6"], driver="12.6"), make_host("zen3", mpi="mpich")],
)
def test_json_lists_each_variant_once_with_its_wheels_in_rank_order(catalog: Any, host: Any) -> None:
    """The grouped JSON is the per-wheel ranking regrouped: variants in order of their best wheel,
    each wheel under its variant in rank order, with the variant's and the wheel's own reasons."""
    resolution = resolve(host, grouped(catalog), catalog, parse_selector("auto", catalog))
    per_wheel_order = [(r.candidate.extra["label"], r.candidate.extra["filename"]) for r in resolution.candidates]
    data = resolution.to_json()
    labels = [c["label"] for c in data["candidates"]]
    assert labels == list(dict.fromkeys(label for label, _ in per_wheel_order))  # first appearance
    for entry in data["candidates"]:
        names = [f["filename"] for f in entry["files"]]
        assert names == [name for label, name in per_wheel_order if label == entry["label"]]
        assert entry["compatible"] == any(f["compatible"] for f in entry["files"])
    wheel = {r.candidate.extra["filename"]: r for r in resolution.candidates}
    for entry in data["candidates"]:
        for file in entry["files"]:
            one = wheel[file["filename"]]
            assert file["compatible"] == one.compatible
            assert sorted(entry["reasons"] + file["reasons"]) == sorted(one.reasons)
    assert sum(len(c["files"]) for c in data["candidates"]) == len(resolution.candidates)


@pytest.mark.parametrize("shape", ["grouped", "per_wheel", "odd_fields"])
@pytest.mark.parametrize("host", [make_host("icelake"), make_host("haswell", gpus=["8.0"], driver="12.4")])
def test_json_text_is_json_dumps(catalog: Any, host: Any, shape: str) -> None:
    if shape == "odd_fields":  # a non-string candidate field, text to escape in a file's fields and reasons
        variant = catalog.prebuilt_variants()[0]
        files = (
            CandidateFile('a%s\u00e9"b.whl', "u\\v", "0" * 64, (), 0, 0),
            CandidateFile(
                "plain.whl", "http://127.0.0.1/plain.whl", "f" * 64, (compat.Finding(False, "no\n%d"),), 1, 1
            ),
            CandidateFile("tab\t.whl", "u", "\u007f", (compat.Finding(True, "ok"),), 2, 2),
        )
        candidates = [Candidate(variant, "index", {"label": "x%", "n": [1, None]}, files=files)]
    else:
        candidates = grouped(catalog) if shape == "grouped" else per_wheel(catalog)
    resolution = resolve(host, candidates, catalog, parse_selector("auto", catalog))
    assert resolution.to_json_text() == json.dumps(resolution.to_json(), separators=(",", ":"))


def test_first_failure_is_the_variants_else_its_best_wheels(catalog: Any) -> None:
    """What the GPU-host warning and the backend quote for a candidate that does not fit."""
    variant = catalog.prebuilt_variants()[0]
    tag_miss = compat.Finding(False, "wheel tag cp310 does not")
    files = (CandidateFile("a.whl", "u", "0" * 64, (tag_miss,), 10**9, 0),)
    ok, bad = compat.Finding(True, "target fits"), compat.Finding(False, "target does not fit")
    assert RankedCandidate(Candidate(variant, files=files), False, (ok,), files).first_failure() == tag_miss.reason
    assert RankedCandidate(Candidate(variant, files=files), False, (ok, bad), files).first_failure() == bad.reason
    assert RankedCandidate(Candidate(variant), True, (ok,)).first_failure() is None
