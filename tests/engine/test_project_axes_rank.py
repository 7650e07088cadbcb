"""A project's own axes are ranked by its catalog's [preferences] (engine/resolve.py RankKey.project_axes).

xxhash's catalog (tests/backend/adopter.py) with an axis of its own: both values
are prebuilt for every target, so only the preference can choose between them;
each order of the preference must win, after the most specific target.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector_backend.cli.main import main
from tests.backend.adopter import CATALOG, bare_project

OWN_AXIS = """
[axes.dispatch]
values = ["static", "runtime"]

[preferences]
dispatch = [{first}, {second}]

[[prebuilt]]
name = "cpu"
target = ["x86_64", "x86_64_v3"]
dispatch = ["static", "runtime"]
"""


@pytest.mark.parametrize("preferred", ["runtime", "static"])
def test_the_projects_preference_picks_among_its_own_axis_values(
    preferred: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "static" if preferred == "runtime" else "runtime"
    root = bare_project(tmp_path / "xxhash")
    own = OWN_AXIS.format(first=json.dumps(preferred), second=json.dumps(other))
    (root / "variants.toml").write_text(CATALOG.split("\n[[prebuilt]]")[0] + own)
    host = tmp_path / "haswell.json"
    host.write_text(json.dumps({"platform": "linux", "machine": "x86_64", "cpu": {"microarch": "haswell"}}))
    monkeypatch.chdir(root)
    assert main(["resolve", "--json", "--host-profile", str(host)]) == 0
    ranked = json.loads(capsys.readouterr().out)
    order = [c["variant"] for c in ranked["candidates"]]
    assert order == [
        {"target": "x86_64_v3", "dispatch": preferred},
        {"target": "x86_64_v3", "dispatch": other},
        {"target": "x86_64", "dispatch": preferred},
        {"target": "x86_64", "dispatch": other},
    ]
