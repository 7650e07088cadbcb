"""A project's own variant provider wheel (publishing/provider_dist.py), for a catalog with an axis of its own.

xxhash's catalog (tests/backend/adopter.py) with a ``dispatch`` axis, which no
standard provider knows: its wheels name ``xxhash_variant_provider:XxhashProvider``
(``variant_json.plugin_api``), so the provider wheel built from that catalog must be
that module, answer for the ``xxhash`` namespace, and rank ``dispatch`` by the
catalog's preferences. variantlib's plugin loader runs it from a fresh venv without
hvd-selector, as an installer would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import load_catalog
from selector_backend.publishing.provider_dist import build_provider_wheel
from tests.backend.adopter import CATALOG, bare_project
from tests.installed import require

require("variantlib", reason="variantlib (PEP 825 reference implementation) not installed")

OWN_AXIS = """
[axes.dispatch]
values = ["static", "runtime"]

[preferences]
dispatch = ["runtime", "static"]

[[prebuilt]]
name = "cpu"
target = ["x86_64", "x86_64_v3"]
dispatch = ["static", "runtime"]
"""

SUPPORTED = (
    "import json, sys; from variantlib.plugins.loader import PluginLoader; "
    "from variantlib.variants_json import VariantsJson; "
    "loader = PluginLoader(VariantsJson(json.load(open(sys.argv[1]))), filter_plugins=[sys.argv[2]]); "
    "loader.__enter__(); "
    "print(json.dumps({f.name: f.values for cfg in loader.get_supported_configs().values() for f in cfg.configs}))"
)


def test_the_projects_provider_answers_for_its_namespace_and_ranks_its_own_axis(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "xxhash")
    (root / "variants.toml").write_text(CATALOG.split("\n[[prebuilt]]")[0] + OWN_AXIS)
    catalog = load_catalog(root / "variants.toml")
    wheel = build_provider_wheel(tmp_path / "dist", catalog)
    assert wheel.name == "xxhash_variant_provider-3.5.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("xxhash_variant_provider-3.5.0.dist-info/METADATA").decode()
        entry_points = archive.read("xxhash_variant_provider-3.5.0.dist-info/entry_points.txt").decode()
        carried = archive.read("xxhash_variant_provider/_engine/selector_backend/variants/catalog.toml").decode()
    assert "Name: xxhash-variant-provider\n" in metadata
    assert f"xxhash = {variant_json.plugin_api(catalog)}" in entry_points
    assert "[axes.dispatch]" in carried
    index = tmp_path / "xxhash-3.5.0-variants.json"  # what the wheels' variant.json files share
    index.write_text(json.dumps({**variant_json.header(catalog), "variants": {}}))
    venv = tmp_path / "venv"
    venv_cmd = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)]
    subprocess.run(venv_cmd, check=True, timeout=120)  # without pip: this pip installs into it (no ensurepip)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True, timeout=300)
    env = {"PATH": "/usr/bin:/bin", "HVD_SELECTOR_TARGET": "haswell", "HVD_SELECTOR_CACHE_DIR": str(tmp_path / "c")}
    done = subprocess.run(
        [str(python), "-c", SUPPORTED, str(index), catalog.namespace],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # no pyproject.toml here: the provider answers for the catalog it carries
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"dispatch": ["runtime", "static"]}
