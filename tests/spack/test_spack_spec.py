"""Spack spec strings: parse, print, and translate to catalog variants (both directions)."""

from __future__ import annotations

import pytest

from selector_backend.cli.main import main
from selector_backend.engine.variant import format_variant
from selector_backend.errors import InputError
from selector_backend.interop.spack.mapping import CUDA_UNRECORDED, spec_to_values, variant_to_spec
from selector_backend.interop.spack.spec import parse_spec, parse_variant_string

BRIEF = "py-horovod@0.28.1 +cuda cuda_arch=80 tensor_ops=nccl controllers=mpi frameworks=pytorch target=x86_64_v3"


def test_parse_and_print_round_trip():
    spec = parse_spec(BRIEF)
    assert spec.name == "py-horovod" and spec.version == "0.28.1" and spec.target == "x86_64_v3"
    assert spec.variant("cuda") is True and spec.variant("cuda_arch") == ("80",)
    assert str(spec) == BRIEF
    assert parse_spec(str(spec)) == spec


def test_spack_forms_that_mean_the_same_value():
    exact = parse_spec("py-horovod controllers:=mpi,gloo cuda_arch==80")
    plain = parse_spec("py-horovod controllers=mpi,gloo cuda_arch=80")
    assert exact == plain
    assert str(exact) == "py-horovod controllers:=mpi,gloo cuda_arch=80"  # := prints back; == does not propagate
    assert parse_variant_string("controllers:=mpi", "e") == parse_variant_string("controllers=mpi", "e")
    assert parse_variant_string("~rocm", "e") == ("rocm", False)


def test_glued_tokens_arch_compiler_and_dependencies():
    spec = parse_spec(
        "py-horovod@=0.28.1+cuda~rocm cuda_arch=80,90 arch=linux-ubuntu22.04-zen3 %gcc@=13.2.0 ^cuda@12.4"
    )
    assert spec.variant("rocm") is False and spec.variant("cuda_arch") == ("80", "90")
    assert (spec.platform, spec.os, spec.target) == ("linux", "ubuntu22.04", "zen3")
    assert spec.compiler == "gcc@=13.2.0"
    assert spec.dependency("cuda").version == "12.4"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("py-horovod ?x", "cannot parse '?x' at column 12"),
        ("py-horovod cuda_arch=", "cuda_arch= has no value"),
        ("py-horovod +cuda +cuda", "variant cuda given twice"),
        ("py-horovod other", "unexpected name 'other'"),
        ("py-horovod ^", "'^' must be followed by a package name"),
        ("py-horovod arch=linux-x", "arch=linux-x is not platform-os-target"),
    ],
)
def test_bad_spec_syntax_is_one_line_input_error(text, message):
    with pytest.raises(InputError, match=message.replace("?", r"\?").replace("^", r"\^")) as info:
        parse_spec(text)
    assert "\n" not in str(info.value)


def test_parse_brief_spec_into_catalog_variant(catalog):
    mapped = spec_to_values(parse_spec(BRIEF), catalog, strict=True, catalog_target=True)
    variant = catalog.make_variant(mapped.values)
    catalog.check(variant)
    # no ^cuda@: the newest catalog line building sm_80 is assumed, and said so
    assert format_variant(variant) == (
        "target=x86_64_v3 cuda=13 cuda_arch=80 tensor_ops=nccl controllers=mpi frameworks=pytorch"
    )
    assert any("no ^cuda@" in n for n in mapped.notes)


def test_cuda_dependency_picks_the_line_and_microarch_maps_to_catalog_target(catalog):
    mapped = spec_to_values(
        parse_spec("py-hvd-selector +cuda cuda_arch=61 tensor_ops=nccl controllers=gloo target=zen3 ^cuda@12.4"),
        catalog,
        strict=True,
        catalog_target=True,
    )
    assert mapped.values["cuda"] == "12" and mapped.values["target"] == "x86_64_v3"
    assert mapped.cuda_version == "12.4"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("py-horovod tensor_ops=ncl", r"unknown value 'ncl' for axis tensor_ops \(did you mean nccl\?\)"),
        ("py-horovod +cuda cuda_arch=90a", r"unknown value '90a' for axis cuda_arch \(did you mean 90\?\)"),
        ("py-horovod +cuda", "needs cuda_arch"),
        ("py-horovod ~cuda cuda_arch=80", "cuda_arch=80 needs \\+cuda"),
        ("py-horovod +rocm", "no AMD GPU"),
        ("py-horovod tensor_op=nccl", r"unknown variant 'tensor_op' \(did you mean tensor_ops\?\)"),
        ("py-horovod +cdua", r"unknown variant 'cdua' \(did you mean cuda\?\)"),
        ("py-horovod +tensor_ops", "tensor_ops takes values"),
        ("py-horovod target=zen9", r"target=zen9 is not an archspec microarchitecture \(did you mean"),
        ("py-horovod +cuda cuda_arch=80 ^cuda@11.8", "not a catalog CUDA line"),
        ("py-horovod +cuda cuda_arch=100 tensor_ops=nccl ^cuda@12", "CUDA 12 cannot build cuda_arch 100"),
        ("py-horovod ~cuda tensor_ops=nccl", "tensor_ops=nccl needs CUDA"),
    ],
)
def test_strict_parse_errors_name_the_problem(catalog, text, message):
    with pytest.raises(InputError, match=message):
        spec_to_values(parse_spec(text), catalog, strict=True, catalog_target=True)


def test_lenient_mapping_collects_problems_and_carries_unknown_variants(catalog):
    spec = parse_spec(
        "py-horovod +cuda cuda_arch=80 tensor_ops=ccl frameworks=pytorch,tensorflow +rocm build_system=python_pip"
    )
    mapped = spec_to_values(spec, catalog, strict=False)
    assert len(mapped.problems) == 3  # ccl, tensorflow, +rocm
    assert ("build_system", ("python_pip",)) in mapped.carried
    assert mapped.values["cuda"] == CUDA_UNRECORDED  # a listing does not record the CUDA version


def test_py_horovod_builds_gloo_for_tensor_ops_gloo(catalog):
    """Spack's py-horovod sets HOROVOD_WITH_GLOO for tensor_ops=gloo whatever controllers says."""
    mapped = spec_to_values(parse_spec("py-horovod ~cuda tensor_ops=gloo controllers=mpi"), catalog, strict=True)
    assert mapped.values["controllers"] == ("mpi", "gloo")
    assert any("builds gloo support" in n for n in mapped.notes)


def test_variant_to_spec_and_back(catalog):
    for variant in catalog.prebuilt_variants():
        spec = variant_to_spec(variant, catalog.spack_package, catalog.version)
        mapped = spec_to_values(parse_spec(str(spec)), catalog, strict=True)
        assert catalog.make_variant(mapped.values) == variant, str(spec)


@pytest.mark.parametrize(
    ("action", "words"),
    [
        ("spec", "^nccl / ^py-torch"),
        ("parse", "Translate a Spack spec"),
        ("pick", "build-cache listing"),
        ("package", "spack/sdists.toml"),
    ],
)
def test_every_spack_action_has_help_text_and_an_example(capsys, action, words):
    with pytest.raises(SystemExit) as exit_info:
        main(["spack", action, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert words in out and f"example:\n  hvd-selector spack {action} " in out
