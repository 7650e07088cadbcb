"""The published artifacts as PEP 825's reference implementation (variantlib) reads them.

variantlib itself is the judge: ``analyze-wheel`` accepts every published
wheel, ``generate-index-json`` reproduces the published ``-variants.json``,
and its resolver, running the project's provider plugin in a subprocess as an
installer would, ranks the published wheels as ``hvd-selector resolve
--index-url`` does, on this machine and on host profiles given through the
plugin's own overrides (``HVD_SELECTOR_*``).
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
from selector_backend.publishing.variant_provider import HvdSelectorProvider, all_configs

from .test_publish import make_wheel

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
    root = tmp_path_factory.mktemp("variantlib")
    wheels = []
    for i, variant in enumerate(catalog.prebuilt_variants()):
        family = catalog.target_family[str(variant["target"])]
        wheels.append(make_wheel(root / "in" / str(i), variant, catalog, tag=f"cp311-cp311-manylinux_2_28_{family}"))
    publish.publish(wheels, root / "site", catalog, progress=False)
    return root / "site"


def project_dir(site: Path) -> Path:
    return site / "simple" / "hvd-selector"


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
        properties = [line for line in report.splitlines() if " :: " in line]
        assert properties and all(line.startswith("hvd_selector :: ") for line in properties)
        assert not any(line.endswith(":: none") for line in properties)  # no 'none' sentinel


def test_generate_index_json_reproduces_the_published_file(site: Path, catalog: Catalog, tmp_path: Path) -> None:
    for wheel in published_wheels(site):
        shutil.copy(wheel, tmp_path / wheel.name)
    done = subprocess.run([*VARIANTLIB, "generate-index-json", "-d", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Skipped" not in done.stderr and "WARNING" not in done.stderr, done.stderr[-2000:]
    generated = json.loads((tmp_path / index_file(site, catalog).name).read_text())
    assert generated == json.loads(index_file(site, catalog).read_text())


def test_variant_json_declares_the_install_time_provider(catalog: Catalog) -> None:
    doc = variant_json.render(catalog.parse_variant(catalog.prebuilt_variants()[0].to_json()), catalog)
    info = VariantDistInfo(json.dumps(doc))
    provider = info.providers[catalog.namespace]
    assert info.namespace_priorities == [catalog.namespace]
    assert provider.plugin_api == variant_json.PLUGIN_API and provider.requires
    assert HvdSelectorProvider.namespace == catalog.namespace


def test_plugin_all_configs_cover_every_published_property(site: Path, catalog: Catalog) -> None:
    known = {(c.name, v) for c in all_configs(catalog) for v in c.values}
    doc = json.loads(index_file(site, catalog).read_text())
    for label, namespaces in doc["variants"].items():
        for feature, values in namespaces[catalog.namespace].items():
            assert (feature, values[0]) in known, (label, feature, values)


# ---------------------------------------------------------------------- ranking
PROFILES = {
    "this machine": ({}, None),
    "x86_64_v2": ({"HVD_SELECTOR_TARGET": "x86_64_v2"}, "x86_64"),
    "x86_64_v3 no MPI": ({"HVD_SELECTOR_TARGET": "x86_64_v3", "HVD_SELECTOR_MPI": "none"}, "x86_64"),
    "x86_64_v4 MPICH": ({"HVD_SELECTOR_TARGET": "x86_64_v4", "HVD_SELECTOR_MPI": "mpich 4.2.0"}, "x86_64"),
    "x86_64_v4 Open MPI": ({"HVD_SELECTOR_TARGET": "x86_64_v4", "HVD_SELECTOR_MPI": "openmpi 5.0.3"}, "x86_64"),
    "neoverse_v2": ({"HVD_SELECTOR_TARGET": "neoverse_v2"}, "aarch64"),
    "neoverse_n1": ({"HVD_SELECTOR_TARGET": "neoverse_n1"}, "aarch64"),
    "neoverse_v2 H100": (
        {"HVD_SELECTOR_TARGET": "neoverse_v2", "HVD_SELECTOR_GPUS": "9.0", "HVD_SELECTOR_CUDA_DRIVER": "13.0"},
        "aarch64",
    ),
    "A100 driver 12.4": (
        {"HVD_SELECTOR_TARGET": "zen3", "HVD_SELECTOR_GPUS": "8.0,8.0", "HVD_SELECTOR_CUDA_DRIVER": "12.4"},
        "x86_64",
    ),
    "A100 driver 13.0": (
        {"HVD_SELECTOR_TARGET": "zen3", "HVD_SELECTOR_GPUS": "8.0", "HVD_SELECTOR_CUDA_DRIVER": "13.0"},
        "x86_64",
    ),
    "mixed V100+A100": (
        {"HVD_SELECTOR_TARGET": "x86_64_v3", "HVD_SELECTOR_GPUS": "7.0,8.0", "HVD_SELECTOR_CUDA_DRIVER": "13.0"},
        "x86_64",
    ),
    "mixed T4+A100 (PTX only for one)": (
        {"HVD_SELECTOR_TARGET": "x86_64_v3", "HVD_SELECTOR_GPUS": "7.5,8.6", "HVD_SELECTOR_CUDA_DRIVER": "12.4"},
        "x86_64",
    ),
    "H100 old driver 11.8": (
        {"HVD_SELECTOR_TARGET": "x86_64_v4", "HVD_SELECTOR_GPUS": "9.0", "HVD_SELECTOR_CUDA_DRIVER": "11.8"},
        "x86_64",
    ),
    "H100 driver 12.2": (
        {"HVD_SELECTOR_TARGET": "x86_64_v4", "HVD_SELECTOR_GPUS": "9.0", "HVD_SELECTOR_CUDA_DRIVER": "12.2"},
        "x86_64",
    ),
    "host profile file: icelake + A100, no MPI": ({"HVD_SELECTOR_HOST_PROFILE": "{profile}"}, "x86_64"),
    "selector cpu on a GPU host": (
        {"HVD_SELECTOR_GPUS": "8.0", "HVD_SELECTOR_CUDA_DRIVER": "13.0", "HVD_SELECTOR": "cpu"},
        "x86_64",
    ),
}

HOST_PROFILE = {
    "platform": "linux",
    "machine": "x86_64",
    "python": "cp311",
    "libc": "glibc 2.39",
    "cpu": {"microarch": "icelake"},
    "gpus": [{"vendor": "nvidia", "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_mib": 81920}],
    "cuda_driver": "13.0",
    "libraries": {"mpi": None, "nccl": None, "gloo": None},
}


def _env(overrides: dict[str, str], site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    empty = site.parent / "config.toml"
    empty.touch()
    env["HVD_SELECTOR_CONFIG"] = str(empty)  # no user config file steers either side
    return {**env, **overrides}


def engine_ranking(site: Path, env: dict[str, str]) -> tuple[list[str], set[str]]:
    """(compatible labels best first, incompatible labels) from ``hvd-selector resolve --index-url``."""
    done = subprocess.run(
        [sys.executable, "-m", "selector_backend", "resolve", "--json", "--index-url", (site / "simple").as_uri()],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert done.returncode in (0, 3), done.stderr
    candidates = json.loads(done.stdout)["candidates"]
    return [c["label"] for c in candidates if c["compatible"]], {c["label"] for c in candidates if not c["compatible"]}


RESOLVE = (
    "import json, sys; from variantlib.api import get_variants_by_priority; "
    "doc = json.load(open(sys.argv[1])); "
    "print(json.dumps([v.label for v in get_variants_by_priority(variants_json=doc)]))"
)


def variantlib_ranking(site: Path, catalog: Catalog, env: dict[str, str]) -> list[str]:
    """Labels variantlib's resolver ranks, in a fresh process as an installer would (it caches plugin answers)."""
    done = subprocess.run(
        [sys.executable, "-c", RESOLVE, str(index_file(site, catalog))], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("name", list(PROFILES))
def test_variantlib_resolver_agrees_with_the_engine(name: str, site: Path, catalog: Catalog) -> None:
    overrides, family = PROFILES[name]
    profile = site.parent / "icelake-a100.json"
    profile.write_text(json.dumps(HOST_PROFILE))
    env = _env({k: v.replace("{profile}", str(profile)) for k, v in overrides.items()}, site)
    engine, incompatible = engine_ranking(site, env)
    ranked = variantlib_ranking(site, catalog, env)
    assert ranked[-1] == "null"  # variantlib always offers the null variant last; none is published
    # An installer first drops wheels whose platform tag does not fit; do the same by machine family.
    family = family or os.uname().machine
    fits = {p.name[: -len(".whl")].rsplit("-", 1)[1] for p in published_wheels(site) if p.name.count(f"_{family}-")}
    ranked = [label for label in ranked if label in fits]
    assert not set(ranked) & incompatible, f"variantlib picks wheels the engine calls incompatible ({name})"
    assert ranked, f"variantlib finds nothing for {name}"
    assert ranked == engine, f"{name}: variantlib {ranked} vs hvd-selector {engine}"
    if "A100" in name or name == "neoverse_v2 H100":  # the GPU facts really reached both sides
        first = json.loads(index_file(site, catalog).read_text())["variants"][ranked[0]][catalog.namespace]
        assert "cuda" in first, f"{name}: a CUDA build should come first, got {first}"


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
    from selector_backend.jobs import build_facts as _facts

    docs = [variant_json.render(v, catalog) for v in catalog.prebuilt_variants()]
    docs.append(LEGACY | {"variants": {"c0ffee01": LEGACY["variants"]["c0ffee01"]}})  # type: ignore[index]
    for doc in docs:
        (tmp_path / "variant.json").write_text(json.dumps(doc))
        facts = _facts.load_facts(tmp_path)
        label, variant = variant_json.parse(json.dumps(doc), catalog)
        assert facts.label == label
        assert facts.axes == {axis: variant.values_of(axis) for axis in variant}, doc
