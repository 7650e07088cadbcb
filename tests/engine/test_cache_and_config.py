"""Issue 30 item 4: ``hvd-selector config`` shows each effective setting with its source, and
``hvd-selector cache`` shows and cleans the cache without ever following a link out of it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from selector_backend.files.private_cache import CacheDir
from selector_backend.install import fetch, plan_reuse

from .engine_helpers import Cli

# ------------------------------------------------------------------ config


def settings_of(result: object) -> dict[str, tuple[str, str]]:
    data = result.json()  # type: ignore[attr-defined]
    return {s["name"]: (s["value"], s["source"]) for s in data["settings"]}


def test_config_names_the_source_of_every_value(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('selector = "cpu"\nindex-retries = 5\n\n[host]\ngpus = "8.0"\n')
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.hvd-selector]\nbuild-policy = "always-build"\nindex-retries = 1\n')
    env = {
        "HVD_SELECTOR_CONFIG": str(config),
        "HVD_SELECTOR_INDEX_TIMEOUT": "12",
        "HVD_SELECTOR_SELECTOR": "gpu-nvidia",
    }
    result = cli("config", "--json", "-C", "offline=1", "-C", "selector=auto", "--pyproject", str(pyproject), env=env)
    assert result.rc == 0, result
    seen = settings_of(result)
    assert seen["offline"] == ("true", "-C offline")
    assert seen["selector"] == ("auto", "-C selector")  # -C over the variable over the file
    assert seen["index-timeout"] == ("12.0", "HVD_SELECTOR_INDEX_TIMEOUT")
    assert seen["index-retries"] == ("5", f"{config}:2")  # the file over pyproject
    assert seen["gpus"] == ("8.0", f"{config}:5")
    assert seen["build-policy"] == ("always-build", "pyproject.toml [tool.hvd-selector]")
    assert seen["download-timeout"] == ("600.0", "default")
    assert seen["target"] == ("detected", "default")
    assert seen["cache-dir"] == (str(tmp_path / "xdg-cache" / "hvd-selector"), "default")
    assert result.json()["config_files"] == [{"path": str(config), "read": True}]


def test_config_text_lists_settings_host_facts_and_files(cli: Cli, tmp_path: Path) -> None:
    result = cli("config", "-C", "cache-dir=/somewhere/else")
    assert result.rc == 0, result
    lines = result.out.splitlines()
    assert lines[0].startswith("settings (precedence: -C > HVD_SELECTOR_* > config file")
    assert any(line.split() == ["cache-dir", "/somewhere/else", "-C", "cache-dir"] for line in lines)
    assert any(line.startswith("host facts") for line in lines)
    assert f"  {tmp_path / 'xdg-config' / 'hvd-selector' / 'config.toml'}  (absent)" in lines


def test_config_with_a_bad_setting_is_one_line(cli: Cli) -> None:
    result = cli("config", env={"HVD_SELECTOR_INDEX_RETRIES": "many"})
    assert result.rc == 2, result
    assert "HVD_SELECTOR_INDEX_RETRIES" in result.one_line_error()


# ------------------------------------------------------------------ cache
BLOB = b"a cached file"
DIGEST = hashlib.sha256(BLOB).hexdigest()


def populated(tmp_path: Path, cli: Cli) -> Path:
    """A cache filled the way installs fill it: a download (wheels, locks), a plan, a catalog memo."""
    cache = tmp_path / "cache"
    source = tmp_path / "blob.whl.bin"
    source.write_bytes(BLOB)
    fetch.cached_download(source.as_uri(), DIGEST, "blob.bin", cache)
    plan_reuse.store(cache, "f" * 64, {"kind": "source"})
    # the memos of the catalog and of the pyproject.toml that names it (engine/project.py)
    assert cli("resolve", "--json", env={"HVD_SELECTOR_CACHE_DIR": str(cache)}).rc == 0
    return cache


def info(cli: Cli, cache: Path) -> dict[str, dict[str, object]]:
    result = cli("cache", "info", "--json", env={"HVD_SELECTOR_CACHE_DIR": str(cache)})
    assert result.rc == 0, result
    data = result.json()
    assert data["cache_dir"] == str(cache) and data["source"] == "HVD_SELECTOR_CACHE_DIR"
    return data["kinds"]


def test_cache_dir_and_info(cli: Cli, tmp_path: Path) -> None:
    cache = populated(tmp_path, cli)
    assert cli("cache", "dir", "-C", f"cache-dir={cache}").out.strip() == str(cache)
    kinds = info(cli, cache)
    assert kinds["wheels"]["files"] == 1 and kinds["wheels"]["bytes"] == len(BLOB)
    assert kinds["locks"]["files"] == 1
    assert kinds["plans"]["files"] == 1
    assert kinds["catalog-memos"]["files"] == 2
    assert kinds["index-pages"]["files"] == 0
    text = cli("cache", "info", env={"HVD_SELECTOR_CACHE_DIR": str(cache)}).out
    assert text.splitlines()[0] == f"cache-dir: {cache} (from HVD_SELECTOR_CACHE_DIR)"
    assert any(line.split()[:2] == ["wheels", "1"] for line in text.splitlines())


def test_cache_clean_by_kind_then_all(cli: Cli, tmp_path: Path) -> None:
    cache = populated(tmp_path, cli)
    env = {"HVD_SELECTOR_CACHE_DIR": str(cache)}
    result = cli("cache", "clean", "plans", env=env)
    assert result.rc == 0, result
    size = len(json.dumps({"key": "f" * 64, "plan": {"kind": "source"}}))
    assert result.out.splitlines() == [f"plans: removed 1 file(s), {size} bytes"]
    kinds = info(cli, cache)
    assert kinds["plans"]["files"] == 0 and kinds["wheels"]["files"] == 1
    assert cli("cache", "clean", env=env).rc == 0
    assert all(kind["files"] == 0 for kind in info(cli, cache).values())
    assert list(cache.iterdir()) == []  # the kinds' directories too; the cache directory stays


def test_cache_clean_never_follows_a_link_out_of_the_cache(cli: Cli, tmp_path: Path) -> None:
    cache = populated(tmp_path, cli)
    outside = tmp_path / "project"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (outside / f"{'0' * 32}.marshal").write_text("named like a parsed page")
    (cache / "index-pages").mkdir()
    (cache / "index-pages" / f"{'1' * 32}.marshal").symlink_to(outside / f"{'0' * 32}.marshal")
    (cache / "wheels" / ("e" * 64)).symlink_to(outside)
    os.rename(cache / "plans", tmp_path / "old-plans")
    (cache / "plans").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    result = cli("cache", "clean", env={"HVD_SELECTOR_CACHE_DIR": str(cache)})
    assert result.rc == 0, result
    assert sorted(p.name for p in outside.iterdir()) == before
    assert list(cache.iterdir()) == []


def test_cache_clean_leaves_a_wheel_being_downloaded(cli: Cli, tmp_path: Path) -> None:
    cache = populated(tmp_path, cli)
    root = CacheDir.open(cache, create=False)
    assert root is not None
    locks = root.child("locks", create=False)
    assert locks is not None
    with root, locks, locks.lock(f"{DIGEST}.lock", 1):
        result = cli("cache", "clean", "wheels", env={"HVD_SELECTOR_CACHE_DIR": str(cache)})
    assert result.rc == 0, result
    assert f"left {cache / 'wheels' / DIGEST} (in use)" in result.out
    assert (cache / "wheels" / DIGEST / "blob.bin").read_bytes() == BLOB


def test_cache_clean_removes_memos_earlier_releases_left_at_the_top(cli: Cli, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    legacy = [cache / f"toml-_venv{i}_lib_catalog_toml.json" for i in range(3)]
    for path in legacy:
        path.write_text("{}")
    (cache / "mine.txt").write_text("not the cache's")
    assert info(cli, cache)["catalog-memos"]["files"] == 3
    result = cli("cache", "clean", "catalog-memos", env={"HVD_SELECTOR_CACHE_DIR": str(cache)})
    assert result.rc == 0, result
    assert not any(path.exists() for path in legacy)
    assert (cache / "mine.txt").exists()


@pytest.mark.parametrize("action", ["info", "clean"])
def test_a_cache_dir_others_can_write_is_not_touched(cli: Cli, tmp_path: Path, action: str) -> None:
    cache = populated(tmp_path, cli)
    cache.chmod(0o777)
    before = sorted(str(p) for p in cache.rglob("*"))
    result = cli("cache", action, env={"HVD_SELECTOR_CACHE_DIR": str(cache)})
    assert result.rc == 2, result
    assert f"cache-dir {cache} is writable by its group and other users (mode 0777)" in result.one_line_error()
    assert sorted(str(p) for p in cache.rglob("*")) == before


def test_an_unknown_kind_is_one_line(cli: Cli, tmp_path: Path) -> None:
    result = cli("cache", "clean", "wheel", env={"HVD_SELECTOR_CACHE_DIR": str(tmp_path)})
    assert result.rc == 2, result
    assert "unknown cache kind 'wheel' (did you mean wheels?)" in result.one_line_error()


def test_a_missing_cache_is_empty(cli: Cli, tmp_path: Path) -> None:
    env = {"HVD_SELECTOR_CACHE_DIR": str(tmp_path / "none")}
    assert "it does not exist yet" in cli("cache", "info", env=env).out
    assert cli("cache", "clean", env=env).out.strip().endswith("does not exist: nothing to clean")
    assert not (tmp_path / "none").exists()
    assert json.loads(cli("cache", "info", "--json", env=env).out)["exists"] is False
