"""A variant with its wheels as one Candidate ranks exactly as one Candidate per wheel would,
and ``to_json_text`` is ``json.dumps(to_json())`` byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selector_backend.engine import compat
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import Candidate, CandidateFile, resolve

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
            {"filename": f"{label}-{tag}.whl", "url": f"http://127.0.0.1/{label}-{tag}.whl", "label": label},
            (finding,),
            order=TAGS.index(tag) if finding.ok else 10**9,
        )
        for _, variant, label, tag, finding in wheels(catalog)
    ]


def grouped(catalog: Any) -> list[Candidate]:
    groups: dict[str, tuple[Any, list[CandidateFile]]] = {}
    for position, variant, label, tag, finding in wheels(catalog):
        files = groups.setdefault(label, (variant, []))[1]
        extra = {"filename": f"{label}-{tag}.whl", "url": f"http://127.0.0.1/{label}-{tag}.whl"}
        files.append(CandidateFile(extra, (finding,), TAGS.index(tag) if finding.ok else 10**9, position))
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
    assert together.to_json() == one_by_one.to_json()  # same order, fields, verdicts and reasons
    assert [r.reasons for r in together.candidates] == [r.reasons for r in one_by_one.candidates]
    assert [r.candidate for r in together.candidates] == [r.candidate for r in one_by_one.candidates]
    assert together.notes == one_by_one.notes
    if together.selected is not None:
        assert together.selected is together.candidates[0]


@pytest.mark.parametrize("shape", ["grouped", "per_wheel", "odd_fields"])
@pytest.mark.parametrize("host", [make_host("icelake"), make_host("haswell", gpus=["8.0"], driver="12.4")])
def test_json_text_is_json_dumps(catalog: Any, host: Any, shape: str) -> None:
    if shape == "odd_fields":  # a non-string field, a file field the candidate overrides, text to escape
        variant = catalog.prebuilt_variants()[0]
        files = (
            CandidateFile({"filename": 'a%s\u00e9"b.whl', "size": 12}, (), 0, 0),
            CandidateFile({"label": "mine", "url": "u"}, (compat.Finding(False, "no\n%d"),), 1, 1),
        )
        candidates = [Candidate(variant, "index", {"label": "x%", "n": [1, None]}, files=files)]
    else:
        candidates = grouped(catalog) if shape == "grouped" else per_wheel(catalog)
    resolution = resolve(host, candidates, catalog, parse_selector("auto", catalog))
    assert resolution.to_json_text() == json.dumps(resolution.to_json(), separators=(",", ":"))
