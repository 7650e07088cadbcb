"""Picking from the two real build-cache listings for hosts of every kind, and the CLI around it."""

from __future__ import annotations

import json
import random

import archspec.cpu
import pytest

from selector_backend.cli.main import main
from selector_backend.engine.policy import parse_selector
from selector_backend.interop.spack.listing import Listing, load_listing
from selector_backend.interop.spack.pick import pick
from selector_backend.interop.spack.spec import format_spec, parse_spec

from .spack_hosts import DATED, DEVELOP, host

# (listing, host args, selector, any_os, expected hash or None, substring of the spec to build instead)
CASES = [
    # x86_64: zen3 and sapphirerapids take x86_64_v3 binaries (ancestor), ivybridge does not
    (DEVELOP, ("ubuntu24.04", "zen3"), None, False, "77qsecczbx2v2o6bjqqmqyd247zndo3g", None),
    (DEVELOP, ("ubuntu24.04", "zen3", "a100"), None, False, "d5fk4yvxodr36zd2kdopfhtdqajq4qds", None),
    (DEVELOP, ("ubuntu24.04", "zen3", "a100"), "cpu", False, "77qsecczbx2v2o6bjqqmqyd247zndo3g", None),
    (DEVELOP, ("ubuntu24.04", "zen3", "gtx1080"), None, False, "77qsecczbx2v2o6bjqqmqyd247zndo3g", None),
    (DEVELOP, ("ubuntu24.04", "zen3", "gtx1080"), "gpu-nvidia", False, None, "+cuda cuda_arch=61 tensor_ops=nccl"),
    (DEVELOP, ("ubuntu22.04", "sapphirerapids", "h100"), None, False, "526edqd44br45hbfwfmzo2z6gvh3cvct", None),
    (DEVELOP, ("ubuntu22.04", "sapphirerapids", "h100"), "gpu-nvidia", False, None, "cuda_arch=90"),
    (DEVELOP, ("ubuntu22.04", "sapphirerapids", "h100"), "gpu-nvidia", True, "d5fk4yvxodr36zd2kdopfhtdqajq4qds", None),
    (DEVELOP, ("ubuntu24.04", "ivybridge"), None, False, None, "~cuda tensor_ops=mpi controllers:=mpi"),
    # aarch64: neoverse_v1 binaries do not run on neoverse_v2 (not an ancestor); aarch64 ones do
    (DEVELOP, ("ubuntu22.04", "neoverse_v1"), None, False, "m56lhp3qhzjb6ndlpjvfkpcd6ewyewgx", None),
    (DEVELOP, ("ubuntu22.04", "neoverse_v2"), None, False, None, "target=neoverse_v2"),
    (DEVELOP, ("ubuntu22.04", "neoverse_v2"), None, True, "4dnhwla4jnxqj6eeaya2b7rnuxs27tnt", None),
    (DEVELOP, ("ubuntu24.04", "neoverse_v2", "h100"), None, False, "5onf63yh7xq2kx52rakhmdybywtxb6ss", None),
    # Apple silicon: only the dated listing has a darwin/sequoia build
    (DEVELOP, ("sequoia", "m2"), None, False, None, "target=aarch64"),
    (DATED, ("sequoia", "m2"), None, False, "c2wozwfzntnwpmpr6cfez6njs7dp2uc7", None),
    (DATED, ("ubuntu24.04", "zen3"), None, False, "qgh5dtlfdb6njzdrfjiacqudhntpajy6", None),
    (DATED, ("ubuntu24.04", "zen3", "a100"), None, False, "xjumcm7pndp2u65grdpq2dsvmjh3ktsr", None),
    (DATED, ("ubuntu24.04", "zen3", "h100"), None, False, "xjumcm7pndp2u65grdpq2dsvmjh3ktsr", None),
    (DATED, ("ubuntu24.04", "zen3", "gtx1080"), "gpu-nvidia", False, None, "cuda_arch=61"),
    (DATED, ("ubuntu24.04", "zen3"), "tensor_ops=gloo", False, None, "tensor_ops=gloo controllers:=gloo"),
    (DATED, ("ubuntu24.04", "neoverse_v2"), None, False, "pov7aayc72gh5irwowgvaauj4wqtpsec", None),
    (DATED, ("ubuntu22.04", "ivybridge"), None, False, None, "target=x86_64_v2"),
]


def _ids(case):
    listing, args, selector, any_os, *_ = case
    name = "dated" if listing == DATED else "develop"
    return f"{name}-{'-'.join(args)}-{selector or 'auto'}{'-anyos' if any_os else ''}"


def _runs_on(binary: str, host_target: str) -> bool:
    """Independent oracle for Spack's target rule, straight from archspec."""
    t = archspec.cpu.TARGETS
    return binary == host_target or t[binary] in t[host_target].ancestors


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_pick_from_real_listings(catalog, case):
    listing_path, args, selector, any_os, expected, build = case
    listing = load_listing(listing_path)
    h = host(*args)
    result = pick(listing, h, catalog, parse_selector(selector, catalog), any_os=any_os)
    data = result.to_json()
    if expected is None:
        assert data["selected"] is None
        assert data["build_instead"] is not None and build in data["build_instead"]["spec"]
        assert data["build_instead"]["spec"].startswith("py-horovod@0.28.1 ")
        assert all(not c["compatible"] and c["reasons"] for c in data["candidates"])
    else:
        sel = data["selected"]
        assert sel is not None and sel["hash"] == expected, sel and sel["reasons"]
        assert sel["install"] == f"spack install /{expected}"
        assert data["build_instead"] is None
        # the engine's answer obeys Spack's rules, checked here without the engine
        assert any_os or sel["os"] == h.os
        assert _runs_on(sel["target"], h.cpu.microarch)
        assert data["candidates"][0]["hash"] == expected and data["candidates"][0]["compatible"]
    assert len(data["candidates"]) == len(listing.entries)


def test_tie_break_is_documented_and_independent_of_listing_order(catalog):
    listing = load_listing(DEVELOP)
    h = host("ubuntu22.04", "zen3")
    selector = parse_selector(None, catalog)
    # with --any-os the ubuntu24.04 (gcc 13) and ubuntu22.04 (gcc 11) builds rank equal:
    # the host's own os wins first, then the newest compiler, then the smallest hash
    expected = "526edqd44br45hbfwfmzo2z6gvh3cvct"
    for seed in range(5):
        entries = list(listing.entries)
        random.Random(seed).shuffle(entries)
        shuffled = Listing(listing.source, listing.format, listing.package, tuple(entries))
        assert pick(shuffled, h, catalog, selector, any_os=True).to_json()["selected"]["hash"] == expected


def test_mpi_comes_with_the_spack_install(catalog):
    """Every listed spec has controllers=mpi; a host without MPI still gets one, with a note."""
    result = pick(load_listing(DEVELOP), host("ubuntu24.04", "zen3"), catalog, parse_selector(None, catalog))
    assert result.selected is not None
    assert any("brings the spec's own ^mpi" in n for n in result.notes)
    with_mpi = pick(
        load_listing(DEVELOP), host("ubuntu24.04", "zen3", mpi="openmpi"), catalog, parse_selector(None, catalog)
    )
    assert with_mpi.selected is not None and not with_mpi.notes


def test_rocm_and_unknown_values_make_a_spec_incompatible_not_an_error(tmp_path, catalog):
    text = DATED.read_text().replace('"~rocm"', '"+rocm"', 1)
    path = tmp_path / "rocm.listing"
    path.write_text(text)
    data = pick(
        load_listing(path), host("ubuntu24.04", "neoverse_v2", "a100"), catalog, parse_selector(None, catalog)
    ).to_json()
    first = next(c for c in data["candidates"] if c["hash"] == "bnzpgqks2klljyo73725vzstbqllzntb")
    assert not first["compatible"] and "no AMD GPU" in first["reasons"][0]


def test_index_sources_record_the_cuda_version(catalog, tmp_path):
    from .spack_hosts import DATA

    # v3 index: an sm_90 build with ^cuda@12.8.0 is checked against the driver with the recorded
    # version: CUDA minor-version compatibility runs it on a 12.4 driver (SASS for the H100;
    # the test expected a refusal before the rule was corrected), but not on an 11.8 one
    listing = load_listing(DATA / "mirror-v3", "py-horovod")
    old_driver = pick(
        listing, host("ubuntu24.04", "zen3", "h100", driver="12.4"), catalog, parse_selector("gpu-nvidia", catalog)
    ).to_json()
    assert old_driver["selected"]["hash"] == "lxdnwpyb2s4ocmxhjbpx4yhmrkrcxpa6"
    assert any("runs CUDA 12.8 builds by minor-version compatibility" in r for r in old_driver["selected"]["reasons"])
    too_old = pick(
        listing, host("ubuntu24.04", "zen3", "h100", driver="11.8"), catalog, parse_selector("gpu-nvidia", catalog)
    ).to_json()
    assert too_old["selected"] is None
    assert any(
        "needs a driver supporting CUDA 12.0 or newer" in r and "supports only CUDA 11.8" in r
        for r in too_old["candidates"][0]["reasons"] + too_old["candidates"][1]["reasons"]
    )
    new_driver = pick(
        listing, host("ubuntu24.04", "zen3", "h100", driver="12.8"), catalog, parse_selector("gpu-nvidia", catalog)
    ).to_json()
    assert new_driver["selected"]["hash"] == "lxdnwpyb2s4ocmxhjbpx4yhmrkrcxpa6"
    # v2 index.json: zen3 binary runs on zen3 and is preferred to the x86_64_v3 mpi one only by the engine
    v2 = load_listing(DATA / "build_cache" / "index.json", "py-horovod")
    sel = pick(v2, host("ubuntu22.04", "zen3"), catalog, parse_selector(None, catalog)).to_json()["selected"]
    assert sel["hash"] == "wlt2mjb3fpwkrxwtqmjqx5kzqklqrn3j"  # tensor_ops=mpi ranks before gloo
    sel = pick(v2, host("ubuntu22.04", "zen3"), catalog, parse_selector("tensor_ops=gloo", catalog)).to_json()[
        "selected"
    ]
    assert sel["hash"] == "ou3dvmi2vsfzrc7ymqwlbzw3lxqt5ytq"
    zen2 = pick(v2, host("ubuntu22.04", "zen2"), catalog, parse_selector("tensor_ops=gloo", catalog))
    assert zen2.selected is None  # a zen3 binary does not run on zen2


# ------------------------------------------------------------------ CLI
def test_cli_pick_json_shape(write_host, capsys):
    path = write_host("ubuntu24.04", "zen3", "a100")
    assert main(["spack", "pick", str(DEVELOP), "--host-profile", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"selected", "candidates", "build_instead"}
    assert set(data["selected"]) >= {"hash", "spec", "compatible", "reasons", "install"}
    assert all(set(c) == {"hash", "spec", "compatible", "reasons"} for c in data["candidates"])


def test_cli_pick_nothing_fits_prints_the_spec_to_build(write_host, capsys):
    path = write_host("ubuntu24.04", "ivybridge")
    assert main(["spack", "pick", str(DEVELOP), "--host-profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "nothing prebuilt fits" in out
    assert "build instead: spack install py-horovod@0.28.1 ~cuda" in out
    assert main(["spack", "pick", str(DEVELOP), "--host-profile", str(path), "--require-prebuilt"]) == 3


def test_cli_spec_for_a_host(write_host, capsys):
    path = write_host("ubuntu24.04", "zen3", "a100", mpi="mpich")
    assert main(["spack", "spec", "--host-profile", str(path), "--package", "py-horovod"]) == 0
    assert capsys.readouterr().out.strip() == (
        "py-horovod@0.28.1 +cuda cuda_arch=80 tensor_ops=nccl controllers:=gloo frameworks:=pytorch "
        "target=x86_64_v3 ^cuda@12 ^nccl cuda_arch=80 ^py-torch cuda_arch=80"
    )
    assert main(["spack", "spec", "--host-profile", str(path), "--selector", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spec"].startswith("py-hvd-selector@0.1.0 ~cuda tensor_ops=mpi controllers:=mpi")
    assert "^" not in data["spec"]  # a CPU build pins no GPU dependency


def test_cli_parse(capsys):
    assert main(["spack", "parse", "py-horovod +cuda cuda_arch=80,90 tensor_ops=nccl ^cuda@12.4"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("target=x86_64 cuda=12 cuda_arch=80,90")
    assert main(["spack", "parse", "py-horovod tensor_ops=ncl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean nccl?" in err


def test_listed_specs_print_and_parse_back():
    for path in (DEVELOP, DATED):
        for entry in load_listing(path).entries:
            text = format_spec(entry.spec)
            assert text.startswith("py-horovod@0.28.1 ") and text.endswith(f"/{entry.hash}")
            assert parse_spec(text) == entry.spec
