"""The catalog's parsed-TOML memo: used only while the text is unchanged and the copy is the user's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector_backend.files.tomlfile import load_toml_remembered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "hvd-selector"


def test_an_edited_file_is_parsed_again(tmp_path: Path, cache: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('x = "one"\n')
    assert load_toml_remembered(toml).data == {"x": "one"}
    (memo,) = cache.glob("toml-*.json")
    assert json.loads(memo.read_text())["data"] == {"x": "one"}
    toml.write_text('x = "two"\n')
    assert load_toml_remembered(toml).data == {"x": "two"}


def test_a_memo_others_can_write_or_that_lies_about_its_text_is_ignored(tmp_path: Path, cache: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('x = "real"\n')
    load_toml_remembered(toml)
    (memo,) = cache.glob("toml-*.json")
    memo.write_text(json.dumps({"text": 'x = "real"\n', "data": {"x": "planted"}}))
    memo.chmod(0o666)
    assert load_toml_remembered(toml).data == {"x": "real"}
    memo.write_text(json.dumps({"text": "something else", "data": {"x": "planted"}}))
    memo.chmod(0o600)
    assert load_toml_remembered(toml).data == {"x": "real"}


def test_a_syntax_error_is_still_one_line_with_the_file(tmp_path: Path, cache: Path) -> None:
    from selector_backend.errors import InputError

    toml = tmp_path / "bad.toml"
    toml.write_text("x = \n")
    with pytest.raises(InputError, match=r"bad\.toml: invalid TOML"):
        load_toml_remembered(toml)


def test_a_warm_resolve_does_not_import_the_toml_parser(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-X", "importtime", "-m", "selector_backend", "resolve", "--json"]
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True)  # first run writes the memo
    second = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip() for line in second.stderr.splitlines() if line.startswith("import time:")}
    assert "selector_backend.engine.catalog" in imported
    assert "tomllib" not in imported
