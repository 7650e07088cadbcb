"""The compatibility rules (DESIGN.md contract): the traps, then properties."""

from __future__ import annotations

import archspec.cpu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector_backend.engine import compat, targets
from selector_backend.engine.compat import check_cuda, check_target, cuda_arch_support

from .engine_helpers import make_host

ALL_TARGETS = sorted(archspec.cpu.TARGETS)
FAMILY_ROOTS = ("x86_64", "aarch64")
HOST_TARGETS = [t for t in ALL_TARGETS if targets.family(t) in FAMILY_ROOTS]
ARCHS = ["50", "52", "60", "61", "70", "72", "75", "80", "86", "87", "89", "90", "100", "103", "120"]
CCS = ["5.0", "5.2", "6.0", "6.1", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "12.0"]


# ------------------------------------------------------------------ CPU traps
@pytest.mark.parametrize(
    ("binary", "host", "ok"),
    [
        ("neoverse_v1", "neoverse_v2", False),  # siblings, not ancestor: the Spack trap
        ("neoverse_v2", "neoverse_v1", False),
        ("x86_64_v3", "ivybridge", False),  # ivybridge has no AVX2
        ("x86_64_v3", "zen3", True),
        ("x86_64_v3", "sapphirerapids", True),
        ("x86_64_v4", "icelake", True),
        ("x86_64_v4", "zen3", False),  # zen3 has no AVX-512
        ("aarch64", "neoverse_v2", True),
        ("x86_64", "neoverse_v2", False),  # wrong family
        ("neoverse_n1", "neoverse_v1", True),
    ],
)
def test_target_rule(binary: str, host: str, ok: bool) -> None:
    finding = check_target(binary, make_host(host))
    assert finding.ok is ok, finding.reason
    assert binary in finding.reason


def test_target_rule_reasons_say_why() -> None:
    assert "not an ancestor of host neoverse_v2" in check_target("neoverse_v1", make_host("neoverse_v2")).reason
    assert "is an aarch64 target" in check_target("neoverse_v1", make_host("icelake")).reason
    assert "ancestor of host icelake" in check_target("x86_64_v3", make_host("icelake")).reason


def test_host_without_cpu_runs_only_the_generic_machine_target() -> None:
    host = make_host(None)
    assert check_target("x86_64", host).ok
    assert not check_target("x86_64_v2", host).ok
    assert not check_target("x86_64", host._replace(machine=None)).ok


def test_unknown_binary_target_is_incompatible_not_a_crash() -> None:
    finding = check_target("x86_64_v9", make_host("icelake"))
    assert not finding.ok and "not an archspec" in finding.reason


# ------------------------------------------------------------------ CPU properties
@pytest.mark.parametrize("root", FAMILY_ROOTS)
def test_family_root_runs_on_every_host_of_its_family(root: str) -> None:
    family = [t for t in ALL_TARGETS if targets.family(t) == root]
    assert len(family) > 5
    for host in family:
        assert targets.runs_on(root, host), host
        assert check_target(root, make_host(host)).ok, host
    other = FAMILY_ROOTS[1 - FAMILY_ROOTS.index(root)]
    for host in (t for t in ALL_TARGETS if targets.family(t) == other):
        assert not check_target(root, make_host(host)).ok


def test_runs_on_is_reflexive_transitive_and_antisymmetric_over_archspec() -> None:
    for t in ALL_TARGETS:
        assert targets.runs_on(t, t)
    runs = {(a, b) for a in ALL_TARGETS for b in ALL_TARGETS if targets.runs_on(a, b)}
    for a, b in runs:
        if a != b:
            assert (b, a) not in runs, (a, b)
        for c in ALL_TARGETS:
            if (b, c) in runs:
                assert (a, c) in runs, (a, b, c)


@given(st.sampled_from(HOST_TARGETS), st.sampled_from(HOST_TARGETS))
def test_check_target_agrees_with_archspec_ancestry(binary: str, host: str) -> None:
    """Brute force: the host's ancestor set, read straight from archspec."""
    micro = archspec.cpu.TARGETS[host]
    expected = binary == host or binary in {a.name for a in micro.ancestors}
    assert check_target(binary, make_host(host)).ok is expected
    # a binary that runs never needs a CPU feature the host lacks
    if expected:
        assert targets.features(binary) <= frozenset(micro.features)


# ------------------------------------------------------------------ CUDA traps
def test_sm61_gpu_with_sm80_build_is_incompatible() -> None:
    assert cuda_arch_support(["80"], "6.1") is None
    findings = check_cuda(["80"], "12.4", make_host(gpus=["6.1"], driver="12.4"))
    assert not compat.compatible(findings)
    assert "cannot run on GPU 6.1" in next(compat.failures(findings))


@pytest.mark.parametrize(
    ("archs", "cc", "support"),
    [
        (["80"], "8.0", "sass"),
        (["80"], "8.6", "sass"),  # same major, higher minor
        (["86"], "8.0", None),  # same major, lower minor: no SASS, PTX too new
        (["70", "80"], "9.0", "ptx"),  # PTX of the highest arch JITs forward
        (["90"], "12.0", "ptx"),
        (["70", "80"], "7.5", "sass"),
        (["70", "90"], "8.0", None),  # sm_70 is 7.x only and compute_90 needs >= 9.0
        (["75", "90"], "8.6", None),
        (["none"], "8.0", None),
        ([], "8.0", None),
    ],
)
def test_cuda_arch_support_table(archs: list[str], cc: str, support: str | None) -> None:
    assert cuda_arch_support(archs, cc) == support


def test_mixed_gpu_host_must_serve_every_gpu() -> None:
    host = make_host(gpus=["7.5", "8.6"], driver="12.6")
    only_80 = check_cuda(["80"], "12.4", host)
    assert not compat.compatible(only_80)
    assert any("GPU 7.5" in r for r in compat.failures(only_80))
    via_ptx = check_cuda(["70"], "12.4", host)
    assert compat.compatible(via_ptx)
    assert compat.worst_cuda_support(["70"], host) == "ptx"
    both_sass = check_cuda(["75", "86"], "12.4", host)
    assert compat.compatible(both_sass)
    assert compat.worst_cuda_support(["75", "86"], host) == "sass"


def test_driver_too_old_for_the_cuda_line() -> None:
    host = make_host(gpus=["9.0"], driver="12.8")
    findings = check_cuda(["90"], "13.0", host)
    assert not compat.compatible(findings)
    failure = next(compat.failures(findings))
    assert "driver supports only CUDA 12.8" in failure and "CUDA 13.0 or newer (driver >= 580" in failure
    assert compat.compatible(check_cuda(["90"], "12.4", host))
    unknown = check_cuda(["90"], "12.4", host._replace(cuda_driver=None))
    assert "driver version unknown" in next(compat.failures(unknown))
    skipped = check_cuda(["90"], None, host._replace(cuda_driver=None))
    assert compat.compatible(skipped)
    assert any("not recorded" in f.reason for f in skipped)


def test_minor_version_compatibility_runs_sass_on_an_older_driver_of_the_same_major() -> None:
    """NVIDIA CUDA Compatibility guide: 12.x binaries run on any driver supporting 12.0 (>= 525)."""
    host = make_host(gpus=["8.0"], driver="12.2")  # A100 on the 535 driver
    findings = check_cuda(["70", "80", "90"], "12.4", host)
    assert compat.compatible(findings), list(compat.failures(findings))
    assert "minor-version compatibility" in findings[-1].reason


def test_ptx_only_gpu_needs_a_driver_at_least_the_toolkit() -> None:
    """The PTX exception: the driver's JIT must know the toolkit's PTX version."""
    host = make_host(gpus=["9.0"], driver="12.2")  # H100 served by compute_80 PTX only
    findings = check_cuda(["70", "80"], "12.4", host)
    failure = next(compat.failures(findings))
    assert "GPU 9.0 runs this build only through PTX JIT" in failure and "CUDA 12.4" in failure
    assert compat.compatible(check_cuda(["70", "80"], "12.4", host._replace(cuda_driver="12.4")))


def test_cuda_build_without_gpu_explains_the_docker_way_out() -> None:
    findings = check_cuda(["80"], "12.4", make_host())
    assert not compat.compatible(findings)
    assert "HVD_SELECTOR_GPUS" in findings[0].reason


def test_cpu_build_has_no_cuda_findings() -> None:
    assert check_cuda(["none"], None, make_host()) == []


# ------------------------------------------------------------------ CUDA properties
def brute_force_support(archs: list[str], cc: str) -> str | None:
    """The rule read literally: list the binary's images, try each on the GPU."""
    real = [a for a in archs if a != "none"]
    if not real:
        return None
    major, minor = (int(x) for x in cc.split("."))
    images = [("sass", int(a) // 10, int(a) % 10) for a in real]
    top = max(real, key=int)
    images.append(("ptx", int(top) // 10, int(top) % 10))
    runnable = set()
    for kind, a_major, a_minor in images:
        if kind == "sass" and a_major == major and a_minor <= minor:
            runnable.add("sass")
        if kind == "ptx" and (a_major, a_minor) <= (major, minor):
            runnable.add("ptx")
    return "sass" if "sass" in runnable else ("ptx" if "ptx" in runnable else None)


@given(st.lists(st.sampled_from(ARCHS), min_size=1, max_size=5, unique=True), st.sampled_from(CCS))
def test_cuda_arch_support_agrees_with_brute_force(archs: list[str], cc: str) -> None:
    assert cuda_arch_support(archs, cc) == brute_force_support(archs, cc)
    # order of the arch list never matters
    assert cuda_arch_support(list(reversed(archs)), cc) == cuda_arch_support(archs, cc)


@given(
    st.lists(st.sampled_from(ARCHS), min_size=1, max_size=4, unique=True),
    st.lists(st.sampled_from(CCS), min_size=1, max_size=4),
)
def test_multi_gpu_host_is_served_iff_every_gpu_is(archs: list[str], ccs: list[str]) -> None:
    host = make_host(gpus=ccs, driver="13.0")
    findings = check_cuda(archs, "12.4", host)
    every = all(brute_force_support(archs, cc) is not None for cc in ccs)
    assert compat.compatible(findings) is every
    worst = compat.worst_cuda_support(archs, host)
    supports = {brute_force_support(archs, cc) for cc in ccs}
    assert worst == (None if None in supports else ("ptx" if "ptx" in supports else "sass"))


@settings(max_examples=60)
@given(
    st.sampled_from(["11.8", "12.0", "12.2", "12.4", "12.8", "13.0", "13.1"]),
    st.sampled_from(["12.4", "13.0"]),
)
def test_driver_rule_is_minor_version_compatibility(driver: str, toolkit: str) -> None:
    """SASS on every GPU: the driver's CUDA major must reach the toolkit's (was: the full version)."""
    host = make_host(gpus=["9.0"], driver=driver)
    ok = compat.compatible(check_cuda(["90"], toolkit, host))
    assert ok is (int(driver.split(".")[0]) >= int(toolkit.split(".")[0]))
    # served through PTX only (compute_80 on a 9.0 GPU): the whole version counts
    via_ptx = compat.compatible(check_cuda(["80"], toolkit, host))
    assert via_ptx is (tuple(map(int, driver.split("."))) >= tuple(map(int, toolkit.split("."))))


# ------------------------------------------------------------------ requirements, os
def test_nccl_needs_a_gpu_and_mpi_needs_the_prebuilt_abi(catalog) -> None:  # type: ignore[no-untyped-def]
    mpi_variant = catalog.parse_variant(
        "target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi frameworks=pytorch"
    )
    assert not compat.compatible(compat.check_requirements(mpi_variant, catalog, make_host()))
    assert compat.compatible(compat.check_requirements(mpi_variant, catalog, make_host(mpi="mpich")))
    openmpi = compat.check_requirements(mpi_variant, catalog, make_host(mpi="openmpi"))
    assert not compat.compatible(openmpi)
    assert "mpich ABI" in next(compat.failures(openmpi))
    # a source build links the host's own MPI, so the ABI does not matter there
    assert compat.compatible(compat.check_requirements(mpi_variant, catalog, make_host(mpi="openmpi"), False))
    nccl_variant = catalog.parse_variant(
        "target=x86_64_v3 cuda=12 cuda_arch=80 tensor_ops=nccl controllers=gloo frameworks=pytorch"
    )
    assert not compat.compatible(compat.check_variant(nccl_variant, catalog, make_host()))
    assert compat.compatible(compat.check_variant(nccl_variant, catalog, make_host(gpus=["8.0"], driver="12.4")))


def test_os_rule() -> None:
    host = make_host(os_name="ubuntu24.04")
    assert compat.check_os("ubuntu24.04", host).ok
    assert not compat.check_os("ubuntu22.04", host).ok
    assert compat.check_os("ubuntu22.04", host, relax=True).ok
