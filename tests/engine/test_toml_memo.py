"""The catalog's parsed-TOML memo: used only while the text is unchanged and the copy is the user's own,
kept in the cache directory the settings name, and pruned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from selector_backend.files import private_cache
from selector_backend.files.tomlfile import MEMO_DIRECTORY, MEMO_KEEP, load_toml_remembered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """The cache directory of this process's settings, as ``load_settings`` records it."""
    before = private_cache.active_cache_dir()
    private_cache.use_cache_dir(tmp_path / "cache")
    yield tmp_path / "cache"
    private_cache._active = before


def memos(cache: Path) -> list[Path]:
    return sorted((cache / MEMO_DIRECTORY).glob("toml-*.json"))


def test_an_edited_file_is_parsed_again(tmp_path: Path, cache: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('x = "one"\n')
    assert load_toml_remembered(toml).data == {"x": "one"}
    (memo,) = memos(cache)
    assert json.loads(memo.read_text())["data"] == {"x": "one"}
    toml.write_text('x = "two"\n')
    assert load_toml_remembered(toml).data == {"x": "two"}


def test_a_memo_others_can_write_or_that_lies_about_its_text_is_ignored(tmp_path: Path, cache: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('x = "real"\n')
    load_toml_remembered(toml)
    (memo,) = memos(cache)
    memo.write_text(json.dumps({"text": 'x = "real"\n', "data": {"x": "planted"}}))
    memo.chmod(0o666)
    assert load_toml_remembered(toml).data == {"x": "real"}
    memo.write_text(json.dumps({"text": "something else", "data": {"x": "planted"}}))
    memo.chmod(0o600)
    assert load_toml_remembered(toml).data == {"x": "real"}


def test_a_memo_behind_a_link_is_not_read(tmp_path: Path, cache: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('x = "real"\n')
    load_toml_remembered(toml)
    (memo,) = memos(cache)
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"text": 'x = "real"\n', "data": {"x": "planted"}}))
    memo.unlink()
    memo.symlink_to(planted)
    assert load_toml_remembered(toml).data == {"x": "real"}
    assert json.loads(planted.read_text())["data"] == {"x": "planted"}  # written around, not through


def test_memos_are_pruned_and_old_top_level_ones_removed(tmp_path: Path, cache: Path) -> None:
    """One memo per catalog file (each venv has its own): only the newest MEMO_KEEP stay, and the
    memos earlier releases left at the top of the cache go."""
    cache.mkdir(mode=0o700)
    legacy = cache / "toml-_old_venv_lib_python3_11_site_packages_variants_catalog_toml.json"
    legacy.write_text("{}")
    unrelated = cache / "notes-toml.json"
    unrelated.write_text("{}")
    for i in range(MEMO_KEEP + 5):
        toml = tmp_path / f"venv{i}" / "catalog.toml"
        toml.parent.mkdir()
        toml.write_text(f"x = {i}\n")
        assert load_toml_remembered(toml).data == {"x": i}
        (new,) = [m for m in memos(cache) if json.loads(m.read_text())["text"] == f"x = {i}\n"]
        os.utime(new, (1000 + i, 1000 + i))  # mtimes in creation order, however coarse the clock
    kept = {json.loads(m.read_text())["text"] for m in memos(cache)}
    assert kept == {f"x = {i}\n" for i in range(5, MEMO_KEEP + 5)}  # the newest
    assert not legacy.exists()
    assert unrelated.exists()


def test_without_settings_nothing_is_kept(tmp_path: Path) -> None:
    before = private_cache.active_cache_dir()
    private_cache._active = None
    try:
        toml = tmp_path / "a.toml"
        toml.write_text('x = "one"\n')
        assert load_toml_remembered(toml).data == {"x": "one"}
    finally:
        private_cache._active = before
    assert not list(tmp_path.rglob("toml-*.json"))


def _resolve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-X", "importtime", "-m", "selector_backend", "resolve", "--json", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "HOME": str(tmp_path / "home"),
        "PATH": "/usr/bin:/bin",
    }
    return {**env, **extra}


def test_a_warm_resolve_does_not_import_the_toml_parser(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    _resolve(env)  # first run writes the memo
    second = _resolve(env)
    imported = {line.split("|")[-1].strip() for line in second.stderr.splitlines() if line.startswith("import time:")}
    assert "selector_backend.engine.catalog" in imported
    assert "tomllib" not in imported
    # one memo each: the catalog, and the pyproject.toml that names it (engine/project.py)
    names = sorted(p.name for p in memos(tmp_path / "xdg-cache" / "hvd-selector"))
    assert len(names) == 2 and names[0].endswith("_pyproject_toml.json") and names[1].endswith("_catalog_toml.json")


@pytest.mark.parametrize("how", ["HVD_SELECTOR_CACHE_DIR", "-C cache-dir"])
def test_the_memo_goes_to_the_configured_cache_dir(tmp_path: Path, how: str) -> None:
    configured = tmp_path / "configured"
    if how == "HVD_SELECTOR_CACHE_DIR":
        _resolve(_clean_env(tmp_path, HVD_SELECTOR_CACHE_DIR=str(configured)))
    else:
        _resolve(_clean_env(tmp_path), "-C", f"cache-dir={configured}")
    assert len(memos(configured)) == 2  # the catalog's and the pyproject.toml's
    assert not (tmp_path / "xdg-cache").exists()
