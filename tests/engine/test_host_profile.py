"""HostProfile JSON: the contract round-trips, and a bad file is one clear line."""

from __future__ import annotations

import json
import string
from typing import Any

import archspec.cpu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector_backend.engine.host import MPI_IMPLEMENTATIONS, CpuInfo, GpuInfo, HostProfile, LibraryInfo
from selector_backend.errors import InputError

from .engine_helpers import make_host

FAMILY_TARGETS = sorted(t for t, m in archspec.cpu.TARGETS.items() if m.family.name in ("x86_64", "aarch64"))
text = st.text(string.ascii_letters + string.digits + ' -_./()[]"é€', min_size=1, max_size=20)
version = st.lists(st.integers(0, 99), min_size=2, max_size=3).map(lambda parts: ".".join(map(str, parts)))


def library(name: str) -> st.SearchStrategy[LibraryInfo | None]:
    impls = list(MPI_IMPLEMENTATIONS) if name == "mpi" else [name]
    return st.none() | st.builds(
        LibraryInfo,
        implementation=st.none() | st.sampled_from(impls),
        version=st.none() | version,
        location=st.none() | text,
    )


@st.composite
def profiles(draw: Any) -> HostProfile:
    micro = draw(st.none() | st.sampled_from(FAMILY_TARGETS))
    cpu = CpuInfo.from_microarch(micro) if micro else None
    nvidia = st.builds(
        GpuInfo,
        vendor=st.just("nvidia"),
        name=text,
        compute_capability=st.sampled_from(["6.1", "7.0", "8.0", "8.6", "9.0", "10.0", "12.1"]),
        memory_mib=st.none() | st.integers(0, 1 << 20),
    )
    other = st.builds(GpuInfo, vendor=st.just("amd"), name=text, compute_capability=st.just(""), memory_mib=st.none())
    return HostProfile(
        platform=draw(st.none() | st.sampled_from(["linux", "darwin", "windows"])),
        os=draw(st.none() | st.sampled_from(["debian12", "ubuntu24.04", "rhel9", "sequoia"])),
        machine=None if cpu is None else cpu.family,
        libc=draw(st.none() | st.sampled_from(["glibc 2.36", "glibc 2.39", "musl 1.2"])),
        python=draw(st.none() | st.sampled_from(["cp310", "cp311", "cp313", "pp310"])),
        cpu=cpu,
        gpus=tuple(draw(st.lists(nvidia | other, max_size=4))),
        cuda_driver=draw(st.none() | version),
        libraries={name: draw(library(name)) for name in ("mpi", "nccl", "gloo")},
        notes=tuple(draw(st.lists(text, max_size=3))),
    )


@settings(max_examples=50, deadline=None)
@given(profiles())
def test_to_json_from_json_round_trips(profile: HostProfile) -> None:
    data = json.loads(json.dumps(profile.to_json()))
    again = HostProfile.from_json(data)
    assert again == profile
    assert again.to_json() == data


def test_minimal_file_derives_cpu_facts_and_means_absent_elsewhere() -> None:
    profile = HostProfile.from_json({"cpu": {"microarch": "zen3"}})
    assert profile.cpu is not None
    assert (profile.cpu.generic, profile.cpu.family) == ("x86_64_v3", "x86_64")
    assert "avx2" in profile.cpu.features
    assert profile.gpus == () and profile.cuda_driver is None and profile.os is None
    assert all(v is None for v in profile.libraries.values())


def test_compute_capability_spellings() -> None:
    for spelled in ("8.0", "80", "sm_80", "compute_80"):
        data = {"gpus": [{"compute_capability": spelled}]}
        assert HostProfile.from_json(data).gpus[0].compute_capability == "8.0"
    assert HostProfile.from_json({"gpus": [{"compute_capability": "12.1"}]}).gpus[0].compute_capability == "12.1"


def test_nvidia_gpus_filters_vendors() -> None:
    host = make_host(gpus=["8.0"])._replace(gpus=(GpuInfo("amd", "MI300X", ""), GpuInfo("nvidia", "A100", "8.0")))
    assert [g.name for g in host.nvidia_gpus()] == ["A100"]


BAD_PROFILES = [
    ({"gpu": []}, "unknown key profile.gpu (did you mean gpus?)"),
    ({"cpu": {"microarch": "zen33"}}, "'zen33' is not an archspec microarchitecture (did you mean zen3?)"),
    ({"cpu": {"microarch": "zen3", "generic": "x86_64_v4"}}, "contradicts archspec"),
    ({"cpu": {"microarch": "zen3"}, "machine": "aarch64"}, "zen3 belongs to the x86_64 family but machine is aarch64"),
    ({"cpu": {"arch": "zen3"}}, "unknown key cpu.arch"),
    ({"gpus": [{"compute_capability": "8.x"}]}, "compute capability '8.x' is not like 8.0"),
    ({"gpus": [{"name": "A100"}]}, "gpus[0] needs a compute_capability"),
    ({"gpus": "8.0"}, "gpus must be a list"),
    ({"gpus": [{"compute_capability": "8.0", "memory_mib": "80GB"}]}, "memory_mib must be a non-negative integer"),
    ({"cuda_driver": "twelve"}, "cuda_driver 'twelve' is not a version"),
    ({"cuda_driver": 12.4}, "cuda_driver must be a non-empty string"),
    ({"libraries": {"mpi": {"implementation": "mpitch"}}}, "did you mean mpich?"),
    ({"libraries": {"mpi": {"version": "four"}}}, "libraries.mpi.version 'four' is not a version"),
    ({"libraries": {"nvshmem": None}}, "unknown key libraries.nvshmem"),
    ({"python": "3.11"}, "python '3.11' is not an interpreter tag"),
    ({"libc": "glibc"}, "libc 'glibc' is not like"),
    ({"platform": "linx"}, "did you mean linux?"),
    ({"notes": "hello"}, "notes must be a list of strings"),
    ([1, 2], "profile must be a JSON object"),
]


@pytest.mark.parametrize(("data", "message"), BAD_PROFILES)
def test_bad_profile_in_process(data: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        HostProfile.from_json(data, source="p.json")
    assert message in str(info.value)
    assert str(info.value).startswith("p.json: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [BAD_PROFILES[0], BAD_PROFILES[5], BAD_PROFILES[9], BAD_PROFILES[7], BAD_PROFILES[13]],
)
def test_bad_profile_through_the_cli(cli: Any, write_json: Any, data: Any, message: str) -> None:
    path = write_json("host.json", data)
    result = cli("resolve", "--host-profile", str(path))
    assert result.rc == 2, result
    line = result.one_line_error()
    assert str(path) in line and message in line


def test_profile_file_that_is_not_json(cli: Any, tmp_path: Any) -> None:
    path = tmp_path / "host.json"
    path.write_text("{not json", encoding="utf-8")
    result = cli("detect", "--host-profile", str(path))
    assert result.rc == 2
    assert "host profile is not valid JSON" in result.one_line_error()
    missing = cli("detect", "--host-profile", str(tmp_path / "nope.json"))
    assert missing.rc == 2 and "cannot read host profile" in missing.one_line_error()


def test_profile_file_resolves_without_detecting(cli: Any, write_json: Any) -> None:
    """A Docker build box: no GPU here, the profile says H100 + CUDA 12.8."""
    path = write_json(
        "h100.json",
        {"cpu": {"microarch": "sapphirerapids"}, "gpus": [{"compute_capability": "9.0"}], "cuda_driver": "12.8"},
    )
    result = cli("resolve", "--json", "--host-profile", str(path))
    assert result.rc == 0, result
    selected = result.json()["selected"]["variant"]
    assert (selected["cuda"], selected["cuda_arch"], selected["tensor_ops"]) == ("12", ["90"], "nccl")
    detect = cli("detect", "--json", "--host-profile", str(path)).json()
    assert detect["os"] is None and detect["libraries"] == {"mpi": None, "nccl": None, "gloo": None}
    assert detect["cpu"]["generic"] == "x86_64_v4"


def test_error_raising_host_reader_is_input_error_not_crash() -> None:
    with pytest.raises(InputError):
        HostProfile.from_json({"gpus": [{"compute_capability": None, "vendor": "nvidia"}]})
