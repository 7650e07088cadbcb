"""A project's description ([tool.hvd-selector], engine/project.py) and a catalog that varies on the CPU alone."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.project import PROJECT_KEYS, load_project, read_pyproject
from selector_backend.engine.variant_json import properties
from selector_backend.errors import InputError
from selector_backend.install.sdist import carry_backend, finish_sdist, with_index_urls
from selector_backend.install.wheel_members import add_members

REPO = Path(__file__).resolve().parents[2]
CPU_ONLY = '[package]\nname = "fastthing"\nversion = "1.0"\n[axes.target]\nvalues = ["x86_64", "x86_64_v3"]\n'


def project_dir(tmp_path: Path, table: str, catalog: str = CPU_ONLY) -> Path:
    (tmp_path / "variants.toml").write_text(catalog)
    (tmp_path / "pyproject.toml").write_text(f'[build-system]\nbuild-backend = "x"\n\n[tool.hvd-selector]\n{table}')
    return tmp_path


def test_a_project_of_its_own_splits_its_table_into_description_and_settings(tmp_path: Path) -> None:
    root = project_dir(tmp_path, 'catalog = "variants.toml"\nindex-url = ["https://example.org/simple"]\n')
    project = load_project(root)
    assert project.declared and project.catalog_path == root / "variants.toml"
    assert dict(project.settings_table) == {"index-url": ["https://example.org/simple"]}
    assert project.build_description == "flags" and project.package("fastthing") == "fastthing"


def test_hvd_selector_is_the_first_user() -> None:
    own = load_project(REPO)
    assert own.declared and own.import_name == "hvd_selector" and own.build_description == "cmake-file"
    assert own.catalog_path == REPO / "variants" / "catalog.toml"


def test_a_table_without_a_catalog_leaves_the_project_to_the_checkout(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.hvd-selector]\nbuild-policy = "always-build"\n')
    project = load_project(tmp_path)
    assert project.catalog_path == REPO / "variants" / "catalog.toml"
    assert dict(project.settings_table) == {"build-policy": "always-build"}


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('catalog = "variants.toml"\nbuild-description = "make"', "build-description: 'make' is not one of flags"),
        ('catalog = "missing.toml"', "missing.toml is not a file"),
        ('import-name = "x"', "the table must also name its catalog"),
        ('catalog = "variants.toml"\nimport-name = "not a name"', "must be a Python import name"),
        ('catalog = "variants.toml"\n[tool.hvd-selector.environment]\nnoequals = {A = "1"}', 'is not "axis=value"'),
    ],
)
def test_a_bad_description_is_one_line_naming_the_key(tmp_path: Path, table: str, says: str) -> None:
    root = project_dir(tmp_path, table)
    with pytest.raises(InputError, match=r"pyproject\.toml \[tool\.hvd-selector\]") as caught:
        read_pyproject(root / "pyproject.toml")
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_reports_a_bad_description_with_exit_2(tmp_path: Path) -> None:
    root = project_dir(tmp_path, 'catalog = "variants.toml"\nbuild-description = "make"')
    done = subprocess.run(
        [sys.executable, "-m", "selector_backend", "resolve"], cwd=root, capture_output=True, text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "build-description" in done.stderr


def test_every_key_is_documented_in_the_schema() -> None:
    from selector_backend.engine import project
    from selector_backend.settings.docs import field_docs

    docs = field_docs(Path(project.__file__))
    assert [k.name for k in PROJECT_KEYS][:2] == ["catalog", "import-name"]
    assert all(docs.get(("ProjectConfig", k.attr)) for k in PROJECT_KEYS)


def test_a_cpu_only_catalog_ranks_and_describes_its_variants(tmp_path: Path) -> None:
    project_dir(tmp_path, 'catalog = "variants.toml"')
    catalog = load_catalog(tmp_path / "variants.toml")
    assert list(catalog.axes) == ["target"] and catalog.namespace == "fastthing"
    assert catalog.axes["target"].default == "x86_64" and catalog.target_family["x86_64_v3"] == "x86_64"
    variant = catalog.parse_variant("target=x86_64_v3")
    assert properties(variant, catalog) == {"x86_64": {"level": ["v3"]}}
    with pytest.raises(InputError, match="no GPU builds"):
        from selector_backend.engine.policy import parse_selector

        parse_selector("gpu-nvidia", catalog)


def test_per_value_tables_apply_to_the_variants_that_have_the_value(tmp_path: Path) -> None:
    root = project_dir(
        tmp_path,
        'catalog = "variants.toml"\n[tool.hvd-selector.config-settings]\n'
        '"target=x86_64_v3" = { "cmake.define.USE_AVX2" = "ON" }\n',
    )
    project = load_project(root)
    assert project.per_value(project.config_settings, {"target": "x86_64_v3"}) == {"cmake.define.USE_AVX2": "ON"}
    assert project.per_value(project.config_settings, {"target": "x86_64"}) == {}


def test_the_sdist_index_url_joins_an_existing_table() -> None:
    import tomllib

    text = (REPO / "pyproject.toml").read_text()
    table = tomllib.loads(with_index_urls(text, ("https://example.org/simple",)))["tool"]["hvd-selector"]
    assert table["index-url"] == ["https://example.org/simple"] and table["catalog"] == "variants/catalog.toml"
    with pytest.raises(InputError, match="already has"):
        with_index_urls(with_index_urls(text, ("https://a/simple",)), ("https://b/simple",))


def test_another_projects_sdist_carries_the_backend_and_its_catalog(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    root = project_dir(tmp_path / "src", 'catalog = "variants.toml"')
    sdist = tmp_path / "fastthing-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(root / "pyproject.toml", "fastthing-1.0/pyproject.toml")
    finish_sdist(sdist, ("https://example.org/simple",), vendor=False, carried=carry_backend(load_project(root)))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        pyproject = tar.extractfile("fastthing-1.0/pyproject.toml").read().decode()  # type: ignore[union-attr]
    assert "fastthing-1.0/variants.toml" in names and "fastthing-1.0/selector_backend/install/backend.py" in names
    assert 'backend-path = ["."]' in pyproject and 'index-url = ["https://example.org/simple"]' in pyproject


def test_members_added_to_a_wheel_get_their_record_rows(tmp_path: Path) -> None:
    wheel = tmp_path / "w-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("w/__init__.py", "")
        archive.writestr("w-1.0.dist-info/RECORD", "w/__init__.py,,\nw-1.0.dist-info/RECORD,,\n")
    add_members(wheel, {"{dist-info}/variant.json": b"{}", "w/variant.json": b"{}"})
    with zipfile.ZipFile(wheel) as archive:
        record = archive.read("w-1.0.dist-info/RECORD").decode().splitlines()
        assert archive.read("w-1.0.dist-info/variant.json") == b"{}"
    assert [r.split(",")[0] for r in record] == [
        "w/__init__.py",
        "w-1.0.dist-info/variant.json",
        "w/variant.json",
        "w-1.0.dist-info/RECORD",
    ]


def test_an_axis_of_the_projects_own_is_written_in_its_namespace_and_read_back(tmp_path: Path) -> None:
    from selector_backend.engine.variant_json import dumps, parse

    own = CPU_ONLY + '[axes.simd]\nvalues = ["sse2", "avx2"]\n'
    project_dir(tmp_path, 'catalog = "variants.toml"', own)
    catalog = load_catalog(tmp_path / "variants.toml")
    variant = catalog.parse_variant("target=x86_64_v3 simd=avx2")
    assert properties(variant, catalog) == {"x86_64": {"level": ["v3"]}, "fastthing": {"simd": ["avx2"]}}
    assert parse(dumps(variant, catalog), catalog, source="test")[1] == variant
    baseline = catalog.parse_variant("target=x86_64 simd=sse2")  # the default is implied, not written
    assert properties(baseline, catalog) == {"x86_64": {"level": ["v1"]}}
    assert parse(dumps(baseline, catalog), catalog, source="test")[1] == baseline
