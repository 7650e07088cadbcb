# Copyright hvd-selector developers. SPDX-License-Identifier: Apache-2.0
#
# GENERATED from variants/catalog.toml by `hvd-selector spack package --write`;
# do not edit. tests/spack/test_spack_package_py.py fails when the two disagree.
# ruff: noqa: F405
# For Spack 1.0 and later (docs/guide/spack.md).
"""Spack package for hvd-selector, the Horovod-style collective library."""

from spack.package import *  # noqa: F403

try:  # Spack >= 1.0 keeps the build-system base classes in its builtin repository
    from spack_repo.builtin.build_systems.cuda import CudaPackage
    from spack_repo.builtin.build_systems.python import PythonPackage
except ImportError:  # Spack < 1.0 exports them from spack.package
    pass

#: Catalog targets, most specific first: HVD_TARGET is the first one the spec's target runs.
HVD_TARGETS = ("neoverse_v2", "neoverse_v1", "neoverse_n1", "x86_64_v4", "x86_64_v3", "x86_64_v2", "x86_64", "aarch64")
#: Value order of the multi-valued axes (the CMake value joins them in this order).
HVD_VALUE_ORDER = {
    "cuda_arch": (
        "none",
        "50",
        "52",
        "60",
        "61",
        "70",
        "72",
        "75",
        "80",
        "86",
        "87",
        "89",
        "90",
        "100",
        "103",
        "110",
        "120",
        "121",
    ),
    "controllers": ("mpi", "gloo"),
    "frameworks": ("pytorch",),
}
#: What each catalog CUDA line (the ^cuda major) can build.
HVD_CUDA_LINES = {
    "12": ("50", "52", "60", "61", "70", "72", "75", "80", "86", "87", "89", "90"),
    "13": ("75", "80", "86", "87", "89", "90", "100", "103", "110", "120", "121"),
}


def hvd_values(runs_on, cuda_major, tensor_ops, controllers, frameworks, cuda_arch):
    """Catalog axis values of a concrete spec (pure, so tests run it without Spack).

    runs_on(target) says whether a binary for a catalog target runs on the spec's
    target (Spack: spec.satisfies('target=T:')); cuda_major is None for ~cuda.
    """
    target = next((t for t in HVD_TARGETS if runs_on(t)), None)
    if target is None:
        raise ValueError("no catalog target runs on this spec's target; targets: " + ", ".join(HVD_TARGETS))

    def ordered(axis, values):
        return tuple(sorted(set(values), key=HVD_VALUE_ORDER[axis].index))

    return {
        "target": target,
        "cuda": str(cuda_major) if cuda_major is not None else "none",
        "cuda_arch": ordered("cuda_arch", cuda_arch) if cuda_major is not None else ("none",),
        "tensor_ops": tensor_ops,
        "controllers": ordered("controllers", controllers),
        "frameworks": ordered("frameworks", frameworks),
    }


def hvd_libraries(values):
    """The Spack dependencies whose prefixes the build of these values needs, in a fixed order."""
    uses = {values["tensor_ops"], *values["controllers"]}
    libraries = ["openssl"] if "gloo" in values["controllers"] else []
    libraries += [name for name in ("mpi", "nccl") if name in uses]
    return libraries + (["cuda"] if values["cuda"] != "none" else [])


def hvd_dependency_settings(values, prefixes, mpicc, cmake):
    """Environment and -D definitions that point the build at the dependencies Spack built.

    prefixes maps each of hvd_libraries(values) to its install prefix, mpicc is the MPI's
    compiler wrapper (None without MPI), cmake Spack's cmake. CMAKE_PREFIX_PATH finds the
    libraries (CMake and the backend's toolchain check), link-path RPATHs keep them found at
    run time, and CMAKE_EXECUTABLE stops scikit-build-core preferring a cmake module of the
    Python prefix. Returns (variables to set, CMAKE_PREFIX_PATH entries, definitions).
    """
    libraries = hvd_libraries(values)
    env = {"CMAKE_EXECUTABLE": cmake}
    defines = {"CMAKE_INSTALL_RPATH_USE_LINK_PATH": "ON"}
    if "mpi" in libraries:
        env["MPICC"] = mpicc
        defines["MPI_C_COMPILER"] = mpicc
    if "nccl" in libraries:
        env["HVD_NCCL_HOME"] = prefixes["nccl"]
    if "cuda" in libraries:
        env["CUDACXX"] = prefixes["cuda"] + "/bin/nvcc"
        env["CUDAToolkit_ROOT"] = prefixes["cuda"]
    return env, [prefixes[name] for name in libraries], defines


class PyHvdSelector(PythonPackage, CudaPackage):
    """Horovod-style collectives (allreduce, allgather, broadcast) over TCP, MPI and NCCL.

    The build is an exact source build of one catalog variant: the selector backend is
    told the variant (HVD_SELECTOR_VARIANT, build policy always-build, offline) and
    hands CMake its build description, as for its own source builds; CMake gets only
    where Spack put the libraries.
    Build from a checkout: spack develop --path /path/to/checkout py-hvd-selector@=0.1.0
    """

    homepage = "https://github.com/hvd-selector/hvd-selector"
    pypi = "hvd-selector/hvd_selector-0.1.0.tar.gz"
    git = "https://github.com/hvd-selector/hvd-selector.git"

    license("Apache-2.0")

    # main from git; published sdists with their sha256 (spack/sdists.toml); the catalog
    # version as its git tag until its sdist is published
    version("main", branch="main")
    version("0.1.0", tag="v0.1.0")

    variant(
        "tensor_ops",
        default="gloo",
        description="library that carries the collective data",
        values=("nccl", "mpi", "gloo"),
        multi=False,
    )
    variant(
        "controllers",
        default="gloo",
        description="how processes find each other and agree on work",
        values=("mpi", "gloo"),
        multi=True,
    )
    variant(
        "frameworks",
        default="pytorch",
        description="framework tensor bridges built in (DLPack)",
        values=("pytorch",),
        multi=True,
    )
    # cuda and cuda_arch are CudaPackage's: refuse the archs the catalog does not build, and
    # per CUDA line the archs it cannot build; NCCL and PyTorch for the same archs (a loop:
    # Spack versions know different archs)
    for _arch in CudaPackage.cuda_arch_values:
        if _arch not in HVD_VALUE_ORDER["cuda_arch"]:
            conflicts(f"cuda_arch={_arch}", msg="not a cuda_arch of the hvd-selector catalog")
            continue
        depends_on(f"nccl+cuda cuda_arch={_arch}", when=f"tensor_ops=nccl cuda_arch={_arch}")
        depends_on(f"py-torch+cuda cuda_arch={_arch}", when=f"frameworks=pytorch cuda_arch={_arch}")
        for _line, _line_archs in HVD_CUDA_LINES.items():
            if _arch not in _line_archs:
                msg = f"CUDA {_line} cannot build cuda_arch {_arch}"
                conflicts(f"cuda_arch={_arch}", when=f"^cuda@{_line}", msg=msg)

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("python@3.10:", type=("build", "run"))
    depends_on("cmake@3.24:", type="build")
    # 0.10: CMAKE_EXECUTABLE picks Spack's cmake over a cmake module in the Python prefix
    depends_on("py-scikit-build-core@0.10:", type="build")
    depends_on("py-nanobind@2.2:", type="build")
    # the backend computes the build description (archspec flags) before CMake runs
    depends_on("py-packaging@22:", type=("build", "run"))
    depends_on("py-archspec@0.2.5:", type=("build", "run"))
    # selector_backend reads TOML with tomllib, or tomli before Python 3.11
    depends_on("py-tomli", type=("build", "run"), when="^python@:3.10")
    depends_on("py-numpy@1.23:", type=("build", "run"))
    depends_on("py-nvidia-ml-py", type="run")
    depends_on("py-torch", type="run", when="frameworks=pytorch")
    depends_on("mpi", when="controllers=mpi")
    depends_on("mpi", when="tensor_ops=mpi")
    # the gloo controller's data plane is the core's own TCP mesh, authenticated with
    # HMAC-SHA256 from libcrypto; it links no Gloo, so any py-torch+gloo can sit beside it
    depends_on("openssl", when="controllers=gloo")
    depends_on("openssl", when="tensor_ops=gloo")
    depends_on("nccl@2.19:", when="tensor_ops=nccl")
    depends_on("cuda@12.4:12,13.0:13", when="+cuda")

    conflicts("tensor_ops=nccl", when="~cuda", msg="tensor_ops=nccl needs CUDA (cuda=12 or cuda=13)")
    conflicts("cuda_arch=none", when="+cuda", msg="a CUDA build needs at least one cuda_arch")
    requires("controllers=gloo", when="tensor_ops=gloo", msg="tensor_ops=gloo needs the gloo controller")
    requires("controllers=mpi", when="tensor_ops=mpi", msg="tensor_ops=mpi needs the mpi controller")

    def hvd_variant(self):
        """This spec as catalog axis values."""
        spec = self.spec
        cuda = spec.satisfies("+cuda")
        return hvd_values(
            lambda t: spec.satisfies(f"target={t}:"),
            spec["cuda"].version.up_to(1) if cuda else None,
            spec.variants["tensor_ops"].value,
            spec.variants["controllers"].value,
            spec.variants["frameworks"].value,
            spec.variants["cuda_arch"].value if cuda else (),
        )

    def setup_build_environment(self, env):
        """The variant for the backend, and for CMake where Spack put each library it links."""
        values = self.hvd_variant()
        text = " ".join(f"{a}={v if isinstance(v, str) else ','.join(v)}" for a, v in values.items())
        env.set("HVD_SELECTOR_VARIANT", text)
        env.set("HVD_SELECTOR_BUILD_POLICY", "always-build")
        env.set("HVD_SELECTOR_OFFLINE", "1")
        libraries = hvd_libraries(values)
        prefixes = {name: str(self.spec[name].prefix) for name in libraries}
        mpicc = None
        if "mpi" in libraries:
            mpicc = getattr(self.spec["mpi"], "mpicc", None) or prefixes["mpi"] + "/bin/mpicc"
        cmake = str(self.spec["cmake"].prefix.bin.cmake)
        variables, prefix_path, dependency_defines = hvd_dependency_settings(values, prefixes, mpicc, cmake)
        for key, value in variables.items():
            env.set(key, value)
        for prefix in reversed(prefix_path):
            env.prepend_path("CMAKE_PREFIX_PATH", prefix)
        env.set("SKBUILD_CMAKE_DEFINE", ";".join(f"{k}={v}" for k, v in dependency_defines.items()))
