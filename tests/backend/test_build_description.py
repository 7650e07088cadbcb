"""The one-way build pipe: Python's build description, and CMake building from it alone.

``cmake_config.describe`` turns a catalog variant into everything CMake needs
(flags, CUDA architectures, libraries, variant.json, build_config.json); the
script it writes is read back here by real CMake. A value added to a copy of
the catalog must give a correct description, and a CMake configure that uses
it, with no other file edited.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import Catalog, load_catalog
from selector_backend.install.cmake_config import (
    FOUND_BY_BUILD,
    BuildDescription,
    Compiler,
    describe,
    probe_compiler,
    write_description,
)

REPO = Path(__file__).resolve().parents[2]
GCC12 = Compiler("GNU", "12.2.0", "/usr/bin/c++")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def config(variant: str, label: str, **axes_and_facts: str) -> dict[str, str]:
    """build_config.json as the description must hold it: the fixed key order, CMake's keys empty."""
    axes = {k: axes_and_facts.pop(k) for k in ("target", "cuda", "cuda_arch", "tensor_ops", "controllers")}
    return {
        "variant_label": label,
        "variant": variant,
        **axes,
        "frameworks": "pytorch",
        **axes_and_facts,
        "compiler": "GNU 12.2.0",
        "mpi_compiler": "",
        "mpiexec": "",
        "build_type": "",
        "nccl_version": "",
    }


GLOO_V3 = "target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"
MPI_BASE = "target=x86_64 cuda=none cuda_arch=none tensor_ops=mpi controllers=mpi,gloo frameworks=pytorch"
NCCL_ARM = "target=neoverse_v2 cuda=13 cuda_arch=100,90 tensor_ops=nccl controllers=gloo frameworks=pytorch"


def test_gloo_x86_64_v3(catalog: Catalog) -> None:
    d = describe(catalog.parse_variant(GLOO_V3), catalog, GCC12)
    assert d.target_flags == ("-march=x86-64-v3", "-mtune=generic")
    assert d.libraries == ("openssl",)  # the gloo controller links no Gloo: its TCP mesh needs libcrypto
    assert (d.cuda, d.cuda_toolkit, d.cuda_architectures) == ("", "", ())
    assert dict(d.build_config) == config(
        GLOO_V3,
        d.label,
        target="x86_64_v3",
        cuda="none",
        cuda_arch="none",
        tensor_ops="gloo",
        controllers="gloo",
        target_flags="-march=x86-64-v3 -mtune=generic",
        cuda_toolkit="",
        cuda_architectures="",
    )
    label, features = next(iter(json.loads(d.variant_json)["variants"].items()))
    assert label == d.label == "9c8567b6"
    # the standard level; gloo is what a CPU build implies; a CPU build is a choice only our provider makes
    assert features == {"x86_64": {"level": ["v3"]}, "hvd_selector": {"nvidia_gpu": ["unused"]}}


def test_mpi_with_the_gloo_controller_links_both(catalog: Catalog) -> None:
    d = describe(catalog.parse_variant(MPI_BASE), catalog, GCC12)
    assert d.target_flags == ("-march=x86-64", "-mtune=generic")
    assert d.libraries == ("openssl", "mpi")
    assert d.build_config["controllers"] == "mpi,gloo" and d.build_config["tensor_ops"] == "mpi"
    assert "set(HVD_WITH_OPENSSL ON)\nset(HVD_WITH_MPI ON)\nset(HVD_WITH_NCCL OFF)\n" in d.cmake_script()


def test_nccl_on_neoverse_v2_gets_sass_for_each_arch_and_ptx_for_the_highest(catalog: Catalog) -> None:
    d = describe(catalog.parse_variant(NCCL_ARM), catalog, GCC12)
    assert d.target_flags == ("-march=armv9-a+i8mm+bf16", "-mtune=cortex-a710")
    assert d.libraries == ("openssl", "nccl")
    assert (d.cuda, d.cuda_toolkit) == ("13", "13.0")
    assert d.cuda_architectures == ("90-real", "100-real", "100-virtual")
    assert d.build_config["cuda_architectures"] == "90-real,100-real,100-virtual"
    assert d.build_config["cuda_arch"] == "90,100"
    assert variant_json.parse(d.variant_json, catalog)[1] == d.variant
    script = d.cmake_script()
    assert "set(HVD_CUDA_ARCHITECTURES 90-real 100-real 100-virtual)" in script
    assert "set(HVD_TARGET_FLAGS -march=armv9-a+i8mm+bf16 -mtune=cortex-a710)" in script


def test_an_impossible_variant_has_no_description(catalog: Catalog) -> None:
    from selector_backend.errors import InputError

    values = catalog.parse_assignments(GLOO_V3.replace("cuda_arch=none", "cuda_arch=80"))
    with pytest.raises(InputError, match=r"takes cuda_arch=none"):
        describe(catalog.make_variant(values), catalog, GCC12)  # unchecked: describe checks it
    with pytest.raises(InputError, match=r"cannot compile for target x86_64_v4 with gcc@4\.8"):
        describe(catalog.parse_variant(GLOO_V3.replace("x86_64_v3", "x86_64_v4")), catalog, Compiler("GNU", "4.8", ""))


# ------------------------------------------------------------------ what CMake reads back
def cmake_read_back(script: Path, out: Path) -> dict[str, str]:
    """Include the description in real CMake (-P) and dump what it set."""
    probe = out / "probe.cmake"
    names = ("HVD_VARIANT_STRING", "HVD_TARGET_FLAGS", "HVD_CUDA_ARCHITECTURES", "HVD_WITH_NCCL", "HVD_CUDA")
    probe.write_text(
        f'include("{script}")\n'
        f'file(WRITE "{out}/variant.json" "${{HVD_VARIANT_JSON_TEXT}}")\n'
        f'file(WRITE "{out}/build_config.json" "${{HVD_BUILD_CONFIG_JSON_TEXT}}")\n'
        + "".join(f'file(APPEND "{out}/vars" "{n}=${{{n}}}\\n")\n' for n in names)
    )
    subprocess.run(["cmake", "-P", str(probe)], check=True, capture_output=True, text=True)
    return dict(line.split("=", 1) for line in (out / "vars").read_text().splitlines())


@needs_cmake
def test_cmake_reads_back_exactly_what_python_wrote(catalog: Catalog, tmp_path: Path) -> None:
    d = describe(catalog.parse_variant(NCCL_ARM), catalog, GCC12)
    # Text CMake would mangle if it were quoted naively: brackets, ${}, ;, quotes, backslashes.
    hostile = '{"x": "]] ]=] ]==] ${HOME} $ENV{PATH} ; \\"quoted\\" \\\\ @at@"}\n'
    d = dataclasses.replace(d, variant_json=hostile)
    got = cmake_read_back(write_description(d, tmp_path / "d.cmake"), tmp_path)
    assert (tmp_path / "variant.json").read_text() == hostile
    assert (tmp_path / "build_config.json").read_text() == d.build_config_json
    assert got == {
        "HVD_VARIANT_STRING": NCCL_ARM.replace("100,90", "90,100"),
        "HVD_TARGET_FLAGS": "-march=armv9-a+i8mm+bf16;-mtune=cortex-a710",
        "HVD_CUDA_ARCHITECTURES": "90-real;100-real;100-virtual",
        "HVD_WITH_NCCL": "ON",
        "HVD_CUDA": "13",
    }


# ------------------------------------------------------------------ adding an axis value
def extended_catalog(tmp_path: Path) -> Path:
    """The project's catalog plus a new CPU target (zen3) and a new CUDA arch (130): nothing else edited."""
    text = (REPO / "variants" / "catalog.toml").read_text()
    edits = [
        ('"x86_64_v4",\n          "aarch64"', '"x86_64_v4", "zen3",\n          "aarch64"'),  # target values
        (
            'x86_64 = ["x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4"]',
            'x86_64 = ["x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4", "zen3"]',
        ),
        ('"110", "120", "121"]\n\n[axes.tensor_ops]', '"110", "120", "121", "130"]\n\n[axes.tensor_ops]'),
        ('"100", "103", "110", "120", "121"]\n', '"100", "103", "110", "120", "121", "130"]\n'),  # cuda_lines.13
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    return path


def test_a_new_target_and_cuda_arch_need_only_the_catalog(tmp_path: Path) -> None:
    catalog = load_catalog(extended_catalog(tmp_path))
    variant = catalog.parse_variant(
        "target=zen3 cuda=13 cuda_arch=130,90 tensor_ops=nccl controllers=gloo frameworks=pytorch"
    )
    d = describe(variant, catalog, GCC12)
    assert d.target_flags == ("-march=znver3", "-mtune=znver3")
    assert d.cuda_architectures == ("90-real", "130-real", "130-virtual")
    assert (d.cuda, d.cuda_toolkit, d.libraries) == ("13", "13.0", ("openssl", "nccl"))
    assert d.build_config["target"] == "zen3" and d.build_config["cuda_arch"] == "90,130"
    assert variant_json.parse(d.variant_json, catalog)[1] == variant
    # The project's own catalog does not know them: the copy alone made them buildable.
    from selector_backend.errors import InputError

    with pytest.raises(InputError):
        load_catalog().parse_variant("target=zen3 tensor_ops=gloo controllers=gloo", fill_defaults=True)


@needs_cmake
def test_cmake_builds_a_new_catalog_target_from_the_description_alone(tmp_path: Path) -> None:
    """Configure the real project from a description for a target only the copied catalog has."""
    compiler = probe_compiler()
    if compiler.cmake_id != "GNU":
        pytest.skip("the expected flags are gcc's")
    path = extended_catalog(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "cmake-config", "--catalog", str(path), "--write",
         str(tmp_path / "d.cmake"), "target=zen3", "tensor_ops=gloo", "controllers=gloo"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    build = configure(tmp_path, f"-DHVD_BUILD_DESCRIPTION={tmp_path / 'd.cmake'}")
    kernels = compile_commands(build)["native/src/kernels_cpu.cpp"]
    assert "-march=znver3 -mtune=znver3" in kernels
    written = json.loads((build / "build_config.json").read_text())
    assert written["target"] == "zen3" and written["build_type"] == "Release"
    assert (
        written["variant"] == "target=zen3 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"
    )
    assert json.loads((build / "variant.json").read_text())["variants"]


def configure(tmp_path: Path, *args: str, **env: str) -> Path:
    build = tmp_path / "build"
    proc = subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return build


def compile_commands(build: Path) -> dict[str, str]:
    """Each source file's compile command, without the parts naming the build directory; files in the
    tree are named relative to it, files in the build directory as ``<build>/...``."""
    commands = json.loads((build / "compile_commands.json").read_text())
    return {
        c["file"].replace(str(build), "<build>").removeprefix(str(REPO) + "/"): " ".join(
            w for w in c["command"].split() if str(build) not in w
        )
        for c in commands
    }


@needs_cmake
def test_only_the_files_that_use_the_variant_compile_differently(tmp_path: Path) -> None:
    """ccache keeps one object per file for every variant (docs/reference/native.md, "The CPU target axis"):
    two variants that differ in target and tensor_ops compile every shared file with the same command, and
    two of the same controllers differ in the kernels and the variant string's file alone."""
    if shutil.which("mpicc.mpich") is None:
        pytest.skip("needs Debian's libmpich-dev (mpicc.mpich)")
    gloo = compile_commands(configure(tmp_path / "gloo", "-DHVD_TARGET=x86_64_v4", "-DHVD_TENSOR_OPS=gloo"))
    # the second finds nanobind elsewhere, as each pip build does (its build environment's random folder)
    import nanobind

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(Path(nanobind.__file__).parent, elsewhere / "nanobind")
    mpi = compile_commands(
        configure(tmp_path / "mpi", "-DHVD_TARGET=x86_64_v3", "-DHVD_TENSOR_OPS=mpi", "-DHVD_CONTROLLERS=mpi",
                  "-DMPI_C_COMPILER=mpicc.mpich", PYTHONPATH=str(elsewhere))
    )  # fmt: skip
    assert "<build>/nanobind/src/nb_type.cpp" in gloo.keys() & mpi.keys(), "nanobind compiles from its copy"
    differ = {f for f in gloo.keys() & mpi.keys() if gloo[f] != mpi[f]}
    variant_files = {"native/src/build_string.cpp", "native/src/context.cpp", "native/src/gpu_loader.cpp"}
    assert differ == {"native/src/kernels_cpu.cpp", *variant_files}
    # the same controllers for another target: only the kernels and the variant string's own file
    gloo_v3 = compile_commands(configure(tmp_path / "gloo-v3", "-DHVD_TARGET=x86_64_v3", "-DHVD_TENSOR_OPS=gloo"))
    differ = {f for f in gloo.keys() & gloo_v3.keys() if gloo[f] != gloo_v3[f]}
    assert differ == {"native/src/kernels_cpu.cpp", "native/src/build_string.cpp"}
    assert not any(str(elsewhere) in command for command in mpi.values())
    assert "-march=x86-64-v4" in gloo["native/src/kernels_cpu.cpp"]
    assert not any("-march" in command for f, command in gloo.items() if f != "native/src/kernels_cpu.cpp")
    assert "mpich" in mpi["native/src/mpi_backend.cpp"]
    assert not any("mpich" in command for f, command in mpi.items() if f != "native/src/mpi_backend.cpp")


def test_wheel_builds_sit_as_deep_in_the_tree_as_the_test_variant_builds(tmp_path: Path) -> None:
    """ccache's base_dir shares an object between builds whose directories are equally deep below the
    tree; a wheel's build directory is made there and the tree is left as it was."""
    from devtools.native_builds import VARIANTS_DIR, cmake_dir
    from selector_backend.install.build import cmake_build_dir

    with cmake_build_dir(tmp_path) as wheel_build:
        wheel_depth = len(wheel_build.relative_to(tmp_path).parts)
        assert wheel_build.parent.is_dir()
    assert wheel_depth == len(cmake_dir(VARIANTS_DIR / "gloo-x86_64_v3-0123").relative_to(REPO).parts)
    assert list(tmp_path.iterdir()) == []


@needs_cmake
def test_plain_cmake_configure_describes_the_build_once_from_hvd_cache_variables(tmp_path: Path) -> None:
    """A developer's cmake -DHVD_TARGET=... gets the same description cmake-config prints."""
    build = configure(tmp_path, "-DHVD_TARGET=x86_64_v2", "-DHVD_NCCL_HOME=/not/an/axis")
    written = (build / "build_description.cmake").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "selector_backend", "cmake-config", "HVD_TARGET=x86_64_v2", "--cxx",
         probe_compiler().path],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert written == proc.stdout
    catalog = load_catalog()
    d = describe(catalog.parse_variant("target=x86_64_v2", fill_defaults=True), catalog, probe_compiler())
    installed = json.loads((build / "build_config.json").read_text())
    assert {k: v for k, v in installed.items() if k not in FOUND_BY_BUILD} == {
        k: v for k, v in d.build_config.items() if k not in FOUND_BY_BUILD
    }
    assert (build / "variant.json").read_text() == d.variant_json


@needs_cmake
def test_what_cmake_found_is_added_to_build_config_as_valid_json(catalog: Catalog, tmp_path: Path) -> None:
    """An mpiexec path with quotes and backslashes (what file(WRITE) used to break) survives."""
    if shutil.which("mpicc.mpich") is None:
        pytest.skip("needs Debian's MPICH (mpicc.mpich)")
    d = describe(catalog.parse_variant(MPI_BASE), catalog, probe_compiler())
    odd = '/opt/my "mpi"\\x/bin/mpiexec'
    build = configure(
        tmp_path,
        f"-DHVD_BUILD_DESCRIPTION={write_description(d, tmp_path / 'd.cmake')}",
        f"-DMPI_C_COMPILER={shutil.which('mpicc.mpich')}",
        f"-DHVD_MPIEXEC_EXECUTABLE={odd}",
    )
    written = json.loads((build / "build_config.json").read_text())
    assert written["mpiexec"] == odd
    assert written["mpi_compiler"] == shutil.which("mpicc.mpich")
    assert {k: v for k, v in written.items() if k not in FOUND_BY_BUILD} == {
        k: v for k, v in d.build_config.items() if k not in FOUND_BY_BUILD
    }


@needs_cmake
def test_a_description_for_another_compiler_is_refused_in_one_line(catalog: Catalog, tmp_path: Path) -> None:
    d = describe(catalog.parse_variant(GLOO_V3), catalog, GCC12)
    other = dataclasses.replace(d, compiler=Compiler("Clang", "99.1.0", "/opt/clang/bin/clang++"))
    path = write_description(other, tmp_path / "d.cmake")
    proc = subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(tmp_path / "b"), f"-DHVD_BUILD_DESCRIPTION={path}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "the build description was made for Clang 99.1.0 but CMake's C++ compiler is" in " ".join(
        proc.stderr.split()
    )


def test_cmake_config_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for args in (["bogus=1"], ["target=pentium5"], ["cuda=none", "cuda_arch=80"], ["target"]):
        proc = subprocess.run(
            [sys.executable, "-m", "selector_backend", "cmake-config", "--write", str(tmp_path / "d"), *args],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert not (tmp_path / "d").exists()


def test_the_description_dataclass_is_all_cmake_gets(catalog: Catalog) -> None:
    """Every variable the script sets is a field's value: nothing is computed on the CMake side."""
    d = describe(catalog.parse_variant(GLOO_V3), catalog, GCC12)
    names = [
        line.split("(", 1)[1].split(" ", 1)[0] for line in d.cmake_script().splitlines() if line.startswith("set(")
    ]
    assert names == [
        "HVD_DESCRIPTION_FORMAT",
        "HVD_VARIANT_STRING",
        "HVD_VARIANT_LABEL",
        "HVD_CXX_COMPILER_ID",
        "HVD_CXX_COMPILER_VERSION",
        "HVD_TARGET_FLAGS",
        "HVD_WITH_OPENSSL",
        "HVD_WITH_MPI",
        "HVD_WITH_NCCL",
        "HVD_CUDA",
        "HVD_CUDA_TOOLKIT",
        "HVD_CUDA_ARCHITECTURES",
        "HVD_VARIANT_JSON_TEXT",
        "HVD_BUILD_CONFIG_JSON_TEXT",
    ]
    assert isinstance(d, BuildDescription)
