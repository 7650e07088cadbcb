"""Issue 12: no input to the index page, variants.json, host profile or config parsers ends in a traceback.

Every parser may refuse its input, but only with a SelectorError (one line,
a documented exit code); anything else escaping is a bug hypothesis finds.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selector_backend.detect.profile_file import load_host_profile
from selector_backend.engine import variant_json
from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile
from selector_backend.errors import SelectorError
from selector_backend.install import variant_index
from selector_backend.settings import apply_host_overrides, load_settings

CATALOG = load_catalog()
PAGE = "http://127.0.0.1:1/simple/hvd-selector/"
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
# values shaped like the real documents, so the fuzzing reaches past the first type check
words = st.sampled_from(["x86_64", "x86_64_v3", "gloo", "none", "8.0", "12.4", "sha", "zen3", "a.whl", ""])
shaped = st.recursive(
    scalars | words,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "files",
                    "filename",
                    "url",
                    "hashes",
                    "sha256",
                    "variants",
                    "hvd_selector",
                    "target",
                    "cpu",
                    "microarch",
                    "gpus",
                    "compute_capability",
                    "libraries",
                    "mpi",
                    "version",
                    "notes",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def refused_cleanly(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except SelectorError as exc:
        assert "\n" not in str(exc).strip()


@FUZZ
@given(
    body=st.binary(max_size=400) | shaped.map(lambda v: json.dumps(v).encode()), kind=st.sampled_from(["json", "html"])
)
def test_index_page_parser(body: bytes, kind: str) -> None:
    refused_cleanly(variant_index.parse_project_page, kind, body, PAGE)


@FUZZ
@given(doc=shaped | json_values)
def test_index_page_parser_structures(doc: Any) -> None:
    refused_cleanly(variant_index.parse_project_page, "json", json.dumps({"files": [doc]}).encode(), PAGE)
    refused_cleanly(variant_index.parse_project_page, "json", json.dumps(doc).encode(), PAGE)


@FUZZ
@given(doc=shaped | json_values, raw=st.binary(max_size=200))
def test_variants_file_readers(doc: Any, raw: bytes) -> None:
    for data in (json.dumps(doc).encode(), json.dumps({"variants": {"l": {"hvd_selector": doc}}}).encode(), raw):
        refused_cleanly(variant_index._variants_document, data, "http://127.0.0.1:1/v.json")
        refused_cleanly(variant_json.parse, data, CATALOG)
    refused_cleanly(variant_json.parse, {"variants": {"l": {"hvd_selector": doc}}}, CATALOG)


@FUZZ
@given(doc=shaped | json_values)
def test_host_profile_reader(doc: Any) -> None:
    refused_cleanly(HostProfile.from_json, doc)
    refused_cleanly(HostProfile.from_json, {"gpus": [doc]})
    refused_cleanly(HostProfile.from_json, {"cpu": doc, "libraries": {"mpi": doc}})


@FUZZ
@given(raw=st.binary(max_size=300) | shaped.map(lambda v: json.dumps(v).encode()))
def test_host_profile_file(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "host.json"
        path.write_bytes(raw)
        refused_cleanly(load_host_profile, path)


toml_values = st.recursive(
    st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12) | words,
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)
setting_names = st.sampled_from(
    [
        *("selector", "index-url", "index-timeout", "download-timeout", "index-file-origins", "index-retries"),
        *("offline", "cache-dir", "gpus", "cuda-driver", "mpi", "nccl", "gloo", "target", "libc", "python", "os"),
        "colour",
    ]
)


@FUZZ
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_config_file_bytes(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_bytes(raw)
        refused_cleanly(lambda: load_settings({}, environ={"HVD_SELECTOR_CONFIG": str(path)}))


@FUZZ
@given(values=st.dictionaries(setting_names, toml_values, max_size=4), host=st.booleans())
def test_config_values_and_host_facts(values: dict[str, Any], host: bool) -> None:
    def both() -> None:
        settings_ = load_settings(values if not host else {}, pyproject={"host": values} if host else None, environ={})
        # host facts only become errors when applied: do that against a fixed profile
        profile = HostProfile.from_json({"cpu": {"microarch": "x86_64_v3"}, "machine": "x86_64"})
        apply_host_overrides(profile, settings_)

    refused_cleanly(both)
