"""The published artifacts as PEP 825's reference implementation (variantlib) reads them.

variantlib itself is the judge: ``analyze-wheel`` accepts every published
wheel, ``generate-index-json`` reproduces the published ``-variants.json``
(but for the ``$schema`` it writes), and its plugin loader runs the
project's provider from the ``hvd-selector-variant-provider`` wheel, installed
without hvd-selector, as an installer would. Which wheel a native installer
picks is tests/ci/test_uv_variants.py's (uv's built-in providers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.publishing import publish
from selector_backend.publishing.variant_provider import HvdSelectorProvider, all_configs, supported_configs

from .test_publish import publish_matrix

variantlib = pytest.importorskip("variantlib", reason="variantlib (PEP 825 reference implementation) not installed")
from variantlib.variant_dist_info import VariantDistInfo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VARIANTLIB = [sys.executable, "-c", "from variantlib.commands.main import main; main()"]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Path:
    """The whole prebuilt matrix published as small wheels (one per variant, tagged for its machine)."""
    return publish_matrix(tmp_path_factory.mktemp("variantlib"), catalog)


def project_dir(site: Path) -> Path:
    """The live generation's folder (the project page links its files)."""
    folder = publish.generation_dir(site, load_catalog())
    assert folder is not None
    return folder


def published_wheels(site: Path) -> list[Path]:
    return sorted(project_dir(site).glob("*.whl"))


def index_file(site: Path, catalog: Catalog) -> Path:
    return project_dir(site) / f"hvd_selector-{catalog.version}-variants.json"


def test_index_file_has_the_normalised_wheel_name(site: Path, catalog: Catalog) -> None:
    names = {p.name for p in project_dir(site).iterdir()}
    assert "hvd_selector-0.1.0-variants.json" in names
    assert "hvd-selector-0.1.0-variants.json" not in names


ANALYZE = (
    "import sys; from variantlib.commands.analyze_wheel import analyze_wheel\n"
    "for path in sys.argv[1:]:\n    print('=== ' + path, flush=True); analyze_wheel(['-i', path]); sys.stdout.flush()"
)


def test_analyze_wheel_accepts_every_published_wheel(site: Path, catalog: Catalog) -> None:
    wheels = published_wheels(site)
    assert len(wheels) == len(catalog.prebuilt_variants())
    done = subprocess.run([sys.executable, "-c", ANALYZE, *map(str, wheels)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]  # analyze-wheel raises on the first wheel it rejects
    reports = done.stdout.split("=== ")[1:]
    assert len(reports) == len(wheels)
    for wheel, report in zip(wheels, reports, strict=True):
        label = wheel.name[: -len(".whl")].rsplit("-", 1)[1]
        assert report.startswith(str(wheel)) and f"Variant: `{label}`" in report, report
        properties = [line.strip() for line in report.splitlines() if " :: " in line]
        assert properties and all(line.split(" :: ")[0] in ("x86_64", "nvidia", "hvd_selector") for line in properties)
        assert not any(line.endswith(":: none") for line in properties)  # no 'none' sentinel


def test_generate_index_json_reproduces_the_published_file(site: Path, catalog: Catalog, tmp_path: Path) -> None:
    for wheel in published_wheels(site):
        shutil.copy(wheel, tmp_path / wheel.name)
    done = subprocess.run([*VARIANTLIB, "generate-index-json", "-d", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Skipped" not in done.stderr and "WARNING" not in done.stderr, done.stderr[-2000:]
    generated = json.loads((tmp_path / index_file(site, catalog).name).read_text())
    published = json.loads(index_file(site, catalog).read_text())
    # variantlib 0.2.2 writes its own $schema (which uv does not know) and reads any: the rest is the same file.
    assert generated.pop("$schema") == variant_json.PREVIOUS_SCHEMA_URL
    assert published.pop("$schema") == variant_json.SCHEMA_URL
    assert generated == published


def test_variant_json_declares_the_install_time_provider(catalog: Catalog) -> None:
    doc = variant_json.render(catalog.parse_variant(catalog.prebuilt_variants()[0].to_json()), catalog)
    info = VariantDistInfo(json.dumps(doc))
    provider = info.providers[catalog.namespace]
    assert info.namespace_priorities == ["nvidia", catalog.namespace, "x86_64"]
    assert provider.plugin_api == variant_json.PLUGIN_API
    assert provider.requires == [f"hvd-selector-variant-provider=={catalog.version}"], "never the package it chooses"
    assert info.providers["x86_64"].requires == ["x86-64-variant-provider"] and not info.providers["x86_64"].plugin_api
    assert HvdSelectorProvider.namespace == catalog.namespace


def test_plugin_all_configs_cover_every_published_property(site: Path, catalog: Catalog) -> None:
    known = {(c.name, v) for c in all_configs(catalog) for v in c.values}
    doc = json.loads(index_file(site, catalog).read_text())
    own = [(label, ns[catalog.namespace]) for label, ns in doc["variants"].items() if catalog.namespace in ns]
    assert own, "the MPI and aarch64 builds use our namespace"
    for label, features in own:
        for feature, values in features.items():
            assert (feature, values[0]) in known, (label, feature, values)


# ---------------------------------------------------------------------- the provider distribution
PROFILES = {
    "this machine": {},
    "x86_64_v4 MPICH": {"HVD_SELECTOR_TARGET": "x86_64_v4", "HVD_SELECTOR_MPI": "mpich 4.2.0"},
    "x86_64_v3 no MPI": {"HVD_SELECTOR_TARGET": "x86_64_v3", "HVD_SELECTOR_MPI": "none"},
    "neoverse_v2": {"HVD_SELECTOR_TARGET": "neoverse_v2", "HVD_SELECTOR_MPI": "none"},
    "neoverse_v1 Open MPI": {"HVD_SELECTOR_TARGET": "neoverse_v1", "HVD_SELECTOR_MPI": "openmpi 5.0.3"},
    "selector tensor_ops=gloo, MPICH": {"HVD_SELECTOR": "tensor_ops=gloo", "HVD_SELECTOR_MPI": "mpich 4.2.0"},
    "GTX 1080": {"HVD_SELECTOR_NVML_REPLAY": str(REPO / "tests" / "data" / "nvml" / "gtx1080.json")},
    "GTX 1080, selector cpu": {
        "HVD_SELECTOR_NVML_REPLAY": str(REPO / "tests" / "data" / "nvml" / "gtx1080.json"),
        "HVD_SELECTOR": "cpu",
    },
}

PLUGIN_ANSWERS = (
    "import json, sys; from variantlib.plugins.loader import PluginLoader; "
    "from variantlib.variants_json import VariantsJson; "
    "doc = VariantsJson(json.load(open(sys.argv[1]))); "
    "loader = PluginLoader(doc, filter_plugins=[sys.argv[2]]); loader.__enter__(); "
    "print(json.dumps({f.name: f.values for cfg in loader.get_supported_configs().values() for f in cfg.configs}))"
)


@pytest.fixture(scope="module")
def provider_venv(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Path:
    """A fresh venv with the provider wheel and no hvd-selector (archspec, packaging, variantlib: the system's)."""
    from selector_backend.publishing.provider_dist import build_provider_wheel

    root = tmp_path_factory.mktemp("provider")
    wheel = build_provider_wheel(root / "dist", catalog)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    alone = subprocess.run([str(python), "-c", "import selector_backend"], capture_output=True, text=True, cwd=root)
    assert alone.returncode != 0, "the provider venv must not see hvd-selector's own selector_backend"
    return python


NO_PATH_EDIT = (
    "import json, sys; before = list(sys.path); "
    "from variantlib.plugins.loader import PluginLoader; from variantlib.variants_json import VariantsJson; "
    "loader = PluginLoader(VariantsJson(json.load(open(sys.argv[1]))), filter_plugins=[sys.argv[2]]); "
    "loader.__enter__(); loader.get_supported_configs(); "
    "import hvd_selector_variant_provider as p; "
    "print(json.dumps({'same_path': sys.path == before, 'top': sorted(m for m in sys.modules if '.' not in m), "
    "'engine': p.HvdSelectorProvider.__module__}))"
)


def test_the_provider_vendors_its_engine_without_touching_sys_path(
    provider_venv: Path, site: Path, catalog: Catalog
) -> None:
    """issue 39: the engine copy is a private package (imports rewritten, as the sdist vendors), so loading
    the provider through variantlib leaves sys.path as it was and imports no top-level ``selector_backend``
    that would shadow, or mix with, a hvd-selector installed beside it."""
    env = {k: v for k, v in _env({}, site).items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(provider_venv), "-c", NO_PATH_EDIT, str(index_file(site, catalog)), catalog.namespace],
        capture_output=True,
        text=True,
        env=env,
        cwd=site.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["same_path"], "loading the provider changed sys.path"
    assert "selector_backend" not in seen["top"], "the provider imported a top-level selector_backend"
    assert seen["engine"] == "hvd_selector_variant_provider._engine.selector_backend.publishing.variant_provider"


@pytest.mark.parametrize("name", list(PROFILES))
def test_the_provider_wheel_answers_through_variantlib_without_hvd_selector(
    name: str, provider_venv: Path, site: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """variantlib's loader imports the plugin as an installer would (a subprocess of the venv's Python)."""
    env = _env(PROFILES[name], site)
    done = subprocess.run(
        [str(provider_venv), "-c", PLUGIN_ANSWERS, str(index_file(site, catalog)), catalog.namespace],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "PYTHONPATH"},
        cwd=site.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    # The copy in the wheel answers exactly as this tree's engine does for the same host and settings.
    for key in [k for k in os.environ if k.startswith("HVD_SELECTOR")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("HVD_SELECTOR"):
            monkeypatch.setenv(key, value)
    from selector_backend.publishing import variant_provider

    host, selector = variant_provider._host_and_selector()
    assert answers == {c.name: c.values for c in supported_configs(catalog, host, selector)}
    mpi = "mpich" in PROFILES[name].get("HVD_SELECTOR_MPI", "") and "gloo" not in PROFILES[name].get("HVD_SELECTOR", "")
    assert ("mpi" in answers.get("tensor_ops", [])) == mpi, answers
    if name.startswith("neoverse_v2"):
        assert answers["target"][0] == "neoverse_v2" and "neoverse_v1" not in answers["target"]
    # a CPU build (nvidia_gpu :: unused) only where there is no NVIDIA GPU or the CPU build is asked for
    cpu_build = not host.nvidia_gpus() or PROFILES[name].get("HVD_SELECTOR") == "cpu"
    assert (answers.get(variant_json.CPU_BUILD[0]) == [variant_json.CPU_BUILD[1]]) == cpu_build, answers
    assert bool(host.nvidia_gpus()) == name.startswith("GTX 1080")


def _env(overrides: dict[str, str], site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    empty = site.parent / "config.toml"
    empty.touch()
    env["HVD_SELECTOR_CONFIG"] = str(empty)  # no user config file steers either side
    return {**env, **overrides}


# ---------------------------------------------------------------------- earlier releases
LEGACY = {
    "$schema": "https://variants-schema.wheelnext.dev/v0.0.3.json",
    "default-priorities": {"namespace": ["hvd_selector"]},
    "variants": {
        "c0ffee01": {
            "hvd_selector": {
                "target": ["x86_64_v3"],
                "cuda": ["13"],
                "cuda_arch": ["80"],
                "tensor_ops": ["nccl"],
                "controllers": ["gloo"],
                "frameworks": ["pytorch"],
            }
        },
        "c0ffee02": {
            "hvd_selector": {
                "target": ["x86_64"],
                "cuda": ["none"],
                "cuda_arch": ["none"],
                "tensor_ops": ["gloo"],
                "controllers": ["gloo"],
                "frameworks": ["pytorch"],
            }
        },
    },
}


def _legacy_index(root: Path, variants_name: str, doc: dict[str, object]) -> Path:
    page = root / "simple" / "hvd-selector"
    page.mkdir(parents=True)
    (page / variants_name).write_text(json.dumps(doc))
    anchors = [f'<a href="{variants_name}">{variants_name}</a>']
    for label in LEGACY["variants"]:  # type: ignore[union-attr]
        name = f"hvd_selector-0.1.0-cp311-cp311-manylinux_2_28_x86_64-{label}.whl"
        anchors.append(f'<a href="{name}#sha256={"ab" * 32}">{name}</a>')
    (page / "index.html").write_text("<html><body>" + "".join(anchors) + "</body></html>")
    return root / "simple"


def test_the_backend_still_reads_an_earlier_release_index(tmp_path: Path, catalog: Catalog) -> None:
    from selector_backend.install import variant_index

    location = _legacy_index(tmp_path, "hvd-selector-0.1.0-variants.json", LEGACY)
    entries = {g.label: g.variant for g in variant_index.read_index_groups(str(location), catalog)}
    assert entries["c0ffee01"] == catalog.parse_variant(
        "target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=gloo frameworks=pytorch"
    )
    assert entries["c0ffee02"]["cuda"] == "none"
    with pytest.raises(variantlib.errors.ValidationError):  # why republishing is needed for PEP 825 installers
        VariantDistInfo(json.dumps({**LEGACY, "variants": {"c0ffee02": LEGACY["variants"]["c0ffee02"]}}))  # type: ignore[index]


def test_an_unknown_schema_is_refused_with_one_line(tmp_path: Path, catalog: Catalog) -> None:
    from selector_backend.errors import ExternalError
    from selector_backend.install import variant_index

    doc = {**LEGACY, "$schema": "https://variants-schema.wheelnext.dev/v9.0.0.json"}
    location = _legacy_index(tmp_path, "hvd_selector-0.1.0-variants.json", doc)
    with pytest.raises(ExternalError, match=r"unsupported variant schema .*upgrade hvd-selector"):
        variant_index.read_index_groups(str(location), catalog)


def test_the_runtime_package_decodes_every_variant_json_as_the_engine_wrote_it(
    tmp_path: Path, catalog: Catalog
) -> None:
    """jobs.build_facts reads variant.json without the engine; both must agree on the property model."""
    from selector_backend.engine.variant import format_variant
    from selector_backend.jobs import build_facts as _facts

    docs = [(variant_json.render(v, catalog), format_variant(v)) for v in catalog.prebuilt_variants()]
    docs.append((LEGACY | {"variants": {"c0ffee01": LEGACY["variants"]["c0ffee01"]}}, None))  # type: ignore[index]
    previous = {
        "$schema": variant_json.PREVIOUS_SCHEMA_URL,
        "variants": {
            "abc": {
                "hvd_selector": {
                    "target": ["x86_64_v3"],
                    "cuda": ["cu13_sm80"],
                    "tensor_ops": ["nccl"],
                    "controllers": ["gloo"],
                    "frameworks": ["pytorch"],
                }
            }
        },
    }
    docs.append((previous, None))  # an installed build of the namespace-only model
    for doc, variant_text in docs:
        (tmp_path / "variant.json").write_text(json.dumps(doc))
        (tmp_path / "build_config.json").unlink(missing_ok=True)
        if variant_text:  # what every build of this release writes beside variant.json
            (tmp_path / "build_config.json").write_text(json.dumps({"variant": variant_text}))
        facts = _facts.load_facts(tmp_path)
        label, variant = variant_json.parse(json.dumps(doc), catalog)
        assert facts.label == label
        assert facts.axes == {axis: variant.values_of(axis) for axis in variant}, doc
