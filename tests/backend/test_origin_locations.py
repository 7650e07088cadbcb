"""The install record holds each index location as the install read it (issue 39: one rule for locations)."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from selector_backend.engine.reinstall import ORIGIN_FILE, Installed, InstallOrigin, reinstall_command
from selector_backend.install import backend


def test_a_relative_directory_index_is_recorded_as_its_file_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-C index-url=wheelhouse`` means the directory where pip ran; recorded as that file:// URI, the
    repair command names the same index from any directory, exactly as recorded."""
    (tmp_path / "wheelhouse").mkdir()
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("demo-1.0.dist-info/RECORD", "demo-1.0.dist-info/RECORD,,\n")
    settings = SimpleNamespace(
        index_url=("wheelhouse", "https://index.example/simple/"), origins={"index-url": "-C index-url"}
    )
    monkeypatch.chdir(tmp_path)
    backend._record_origin(wheel, SimpleNamespace(settings=settings, kind="prebuilt", reason="fits"))  # type: ignore[arg-type]
    with zipfile.ZipFile(wheel) as source:
        record = json.loads(source.read(f"demo-1.0.dist-info/{ORIGIN_FILE}"))
    local = (tmp_path / "wheelhouse").resolve().as_uri()
    assert record["index_urls"] == [local, "https://index.example/simple/"]
    monkeypatch.chdir(os.sep)
    origin = InstallOrigin(tuple(record["index_urls"]), record["index_from"], "prebuilt", "fits")
    command = reinstall_command(Installed("1.0", "pip", origin), sys.executable)
    assert f"--extra-index-url {local} --extra-index-url https://index.example/simple/" in command
    assert f"-C 'index-url={local} https://index.example/simple/'" in command


def test_the_cache_warning_names_the_command_doctor_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39: the wheel-cache warning gives the repair command of ``engine.reinstall`` (its flags,
    this interpreter), not a flags hint of its own."""
    from selector_backend.engine.catalog import load_catalog

    catalog = load_catalog()
    chosen = catalog.parse_variant("target=x86_64_v3 tensor_ops=gloo controllers=gloo", fill_defaults=True)
    other = catalog.parse_variant("target=x86_64 tensor_ops=gloo controllers=gloo", fill_defaults=True)
    monkeypatch.setattr(backend, "_installed_variant", lambda: other)
    plan = SimpleNamespace(kind="source", variant=chosen, reason="asked")
    backend._announce(plan)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "this install chose another" in err, err
    assert f"with your settings added to {reinstall_command(None, sys.executable)} (the command" in err, err
