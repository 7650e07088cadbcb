"""Issue 10: the typed settings model (one source chain) and the one ``select`` pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import parse_selector
from selector_backend.engine.resolve import resolve
from selector_backend.engine.select import Sources, select, select_with
from selector_backend.engine.sources import catalog_matrix
from selector_backend.errors import InputError
from selector_backend.settings import load_settings
from selector_backend.settings.docs import documented_options
from selector_backend.settings.model import OPTIONS, Settings

ZEN3 = HostProfile.from_json({"cpu": {"microarch": "zen3"}, "platform": "linux", "python": "cp311"})


def no_host() -> HostProfile:
    raise AssertionError("the host was asked for although the input was bad")


# ------------------------------------------------------------------ the model
def test_values_are_typed_when_loaded(tmp_path: Path) -> None:
    settings = load_settings(
        {"gpus": "sm_80 8.6", "mpi": "openmpi 5.0.3", "index-retries": "5", "detect-timeout": "2.5"},
        environ={"XDG_CACHE_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert [g.compute_capability for g in settings.host.gpus or ()] == ["8.0", "8.6"]
    assert settings.host.mpi is not None and (settings.host.mpi.implementation, settings.host.mpi.version) == (
        "openmpi",
        "5.0.3",
    )
    assert settings.index_retries == 5 and settings.detect_timeout == 2.5
    assert settings.cache_dir == tmp_path / "hvd-selector"  # the computed default follows the environment given
    assert settings.host.cuda_driver is None and "cuda-driver" not in settings.origins


def test_every_field_is_a_knob_with_a_doc_string() -> None:
    knobs = {o.attr for o in OPTIONS}
    assert knobs == (set(Settings._fields) - {"host", "origins"}) | set(Settings._field_defaults["host"]._fields)
    assert all(d.help for d in documented_options())


@pytest.mark.parametrize(
    ("given", "environ", "message"),
    [
        ({"detect-timeout": "soon"}, {}, "-C detect-timeout: detect-timeout='soon' is not a number of seconds"),
        ({}, {"HVD_SELECTOR_DETECT_TIMEOUT": "0"}, "HVD_SELECTOR_DETECT_TIMEOUT='0' must be between 0 and 3600"),
        ({"gpus": "sm_1000"}, {}, "-C gpus: compute capability 'sm_1000'"),
        ({"mpi": "lam 7"}, {}, "unknown MPI implementation in -C mpi 'lam'"),
        ({}, {"HVD_SELECTOR_BUILD_POLICY": "sometimes"}, "HVD_SELECTOR_BUILD_POLICY: unknown value for build-policy"),
    ],
)
def test_bad_values_fail_when_loaded(given: dict[str, str], environ: dict[str, str], message: str) -> None:
    with pytest.raises(InputError) as caught:
        load_settings(given, environ={"XDG_CONFIG_HOME": "/nonexistent", **environ})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_detect_timeout_from_c_bounds_detection(cli: Any, tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "mpiexec").write_text("#!/bin/sh\nsleep 20\n", encoding="utf-8")
    (tools / "mpiexec").chmod(0o755)
    result = cli("detect", "--json", "-C", "detect-timeout=0.5", path_prepend=tools, timeout=15)
    assert result.rc == 0, result
    assert any("mpiexec: timed out after 0.5 s" in n for n in result.json()["notes"])


# ------------------------------------------------------------------ select
def test_select_ranks_what_resolve_ranks(catalog: Any) -> None:
    settings = Settings(selector="cpu tensor_ops=gloo")
    selection = select(settings, catalog, Sources(lambda: ZEN3, lambda _host: catalog_matrix(catalog)))
    direct = resolve(ZEN3, list(catalog_matrix(catalog)), catalog, parse_selector(settings.selector, catalog))
    assert selection.host is ZEN3
    assert [r.variant for r in selection.candidates] == [r.variant for r in direct.candidates]
    assert selection.chosen is not None and direct.selected is not None
    assert selection.chosen.variant == direct.selected.variant
    assert selection.source_build == direct.source_build and selection.requested is None


def test_select_reads_the_request_before_the_host(catalog: Any) -> None:
    for bad in (Settings(selector="gpu-nvida"), Settings(variant="tensor_ops=nope")):
        with pytest.raises(InputError):
            select(bad, catalog, Sources(no_host))


def test_a_requested_variant_is_the_source_build(catalog: Any) -> None:
    settings = Settings(variant="target=x86_64_v3 tensor_ops=gloo", origins={"variant": "-C variant"})
    selection = select(settings, catalog, Sources(lambda: ZEN3))
    assert selection.requested is not None and selection.source_build == selection.requested
    assert selection.requested["target"] == "x86_64_v3" and selection.requested_by == "-C variant"
    assert selection.candidates == ()  # the backend ranks nothing for a requested variant


def test_no_source_build_raises_the_reason(catalog: Any) -> None:
    power = HostProfile.from_json({"cpu": {"microarch": "power9le"}})
    selection = select_with(parse_selector(None, catalog), catalog, Sources.fixed(power))
    assert selection.source_build is None
    with pytest.raises(Exception, match="no catalog target runs on host CPU power9le"):
        selection.require_source_build()
