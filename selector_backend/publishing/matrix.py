"""The CI wheel matrix: one cibuildwheel job per prebuilt variant.

cibuildwheel's per-build overrides can only select on the Python/platform
identifier, so a variant cannot be an override: each variant is one job of
the CI system's own matrix, and the variant reaches the PEP 517 backend as
the config setting ``variant="axis=value ..."`` (``CIBW_CONFIG_SETTINGS``),
which forces a source build of exactly that variant. Everything a job needs
(runner, image, recipes, auditwheel exclusions) is derived here from the
catalog, so the GitHub workflow and ``--format json`` can never disagree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector_backend import PACKAGE_DIR
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.project import load_project
from selector_backend.engine.variant import Variant, format_variant, variant_label
from selector_backend.errors import InputError, unknown_choice

#: GitHub Actions refuses a matrix with more jobs than this.
GITHUB_MATRIX_LIMIT = 256

#: CPython versions every variant job builds (requires-python >= 3.10), and 3.14's
#: free-threaded build: the core runs every call with the GIL released already, so it
#: declares itself free-threading safe (nanobind FREE_THREADED; docs/guide/ci-matrix.md).
DEFAULT_PYTHONS = ("cp310", "cp311", "cp312", "cp313", "cp314", "cp314t")

#: GitHub-hosted runners per machine family.
RUNNERS = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}

#: manylinux images for CPU-only builds (cibuildwheel's default policy, pinned by name).
CPU_IMAGES = {
    "x86_64": "quay.io/pypa/manylinux_2_28_x86_64",
    "aarch64": "quay.io/pypa/manylinux_2_28_aarch64",
}

#: CUDA manylinux images (manylinux_2_28 + the CUDA toolkit); {toolkit} is the
#: catalog's cuda_lines.N.toolkit, so a new CUDA line needs no code change. The names
#: are PyTorch's own (WHEEL_CONTAINER_IMAGES in pytorch/pytorch's
#: .github/scripts/generate_binary_build_matrix.py): x86_64 CUDA wheels build in
#: manylinux2_28-builder, aarch64 CUDA wheels in manylinuxaarch64-builder
#: (manylinux2_28_aarch64-builder is PyTorch's CPU-only aarch64 image).
CUDA_IMAGES = {
    "x86_64": "pytorch/manylinux2_28-builder:cuda{toolkit}",
    "aarch64": "pytorch/manylinuxaarch64-builder:cuda{toolkit}",
}

#: Shared libraries the wheel links but must not carry: the driver and NVML come
#: with the machine, the CUDA runtime and NCCL from the gpu-nvidia extra's
#: wheels, MPI from the mpi extra or the system (MPICH 12 -- libmpich.so.12 on
#: Debian/Ubuntu --, the MPI ABI standard's libmpi_abi.so.1, Open MPI 40).
CUDA_EXCLUDES = ("libcuda.so.1", "libnvidia-ml.so.1")
NCCL_EXCLUDES = ("libnccl.so.2",)
MPI_EXCLUDES = ("libmpi.so.12", "libmpich.so.12", "libmpi_abi.so.1", "libmpi.so.40")

#: Targets at or above these generic levels need ISA extensions that the
#: manylinux tag cannot express; auditwheel's ISA check is disabled for them on
#: purpose (variant.json + the selector's compatibility check guard them) and
#: kept for the baseline targets, where an extension would be a bug.
BASELINE_TARGETS = ("x86_64", "aarch64")


@dataclass(frozen=True)
class Job:
    """One CI job: build every Python of one variant on one image."""

    entry: str
    variant: Variant
    family: str
    runner: str
    image: str
    pythons: tuple[str, ...]
    recipes: tuple[str, ...]
    auditwheel_excludes: tuple[str, ...]
    isa_check: bool
    cuda_toolkit: str | None = None
    extra_environment: Mapping[str, str] = field(default_factory=dict)
    #: where the project's recipes install dependencies inside the container (its ci-deps-prefix; "": none)
    deps_prefix: str = ""

    @property
    def label(self) -> str:
        return variant_label(self.variant)

    @property
    def name(self) -> str:
        return f"{self.entry} {self.variant['target']} {self.label}"

    @property
    def variant_string(self) -> str:
        return format_variant(self.variant)

    @property
    def build_identifiers(self) -> str:
        return " ".join(f"{py}-manylinux_{self.family}" for py in self.pythons)

    @property
    def config_settings(self) -> dict[str, str]:
        return {"variant": self.variant_string}

    @property
    def config_settings_text(self) -> str:
        """CIBW_CONFIG_SETTINGS: shlex-split by cibuildwheel, hence the quotes."""
        return " ".join(f'{k}="{v}"' for k, v in self.config_settings.items())

    @property
    def before_all(self) -> str:
        return " && ".join(f"bash {{project}}/{r}" for r in self.recipes) or "true"

    @property
    def repair(self) -> str:
        parts = ["auditwheel repair -w {dest_dir} {wheel}"]
        parts += [f"--exclude {name}" for name in self.auditwheel_excludes]
        if not self.isa_check:
            parts.append("--disable-isa-ext-check")
        return " ".join(parts)

    @property
    def container_environment(self) -> str:
        """CIBW_ENVIRONMENT: where the recipes put headers, libraries and tools."""
        path = [f"{self.deps_prefix}/bin"] if self.deps_prefix else []
        if self.cuda_toolkit:
            path.insert(0, f"/usr/local/cuda-{self.cuda_toolkit}/bin")
        items = {"CMAKE_PREFIX_PATH": self.deps_prefix} if self.deps_prefix else {}
        if path:
            items["PATH"] = ":".join([*path, "$PATH"])
        items.update(self.extra_environment)
        return " ".join(f'{k}="{v}"' for k, v in items.items())

    def environment(self) -> dict[str, str]:
        """The cibuildwheel environment of this job, fully resolved.

        Derived from the matrix row through WORKFLOW_ENV, exactly as GitHub
        resolves the workflow's ``${{ matrix.* }}`` references, so the two
        cannot disagree; only this job's family's image variable is kept.
        """
        row = self.matrix_entry()
        other = {f"CIBW_MANYLINUX_{f.upper()}_IMAGE" for f in RUNNERS if f != self.family}
        return {key: row[fld] for key, fld in WORKFLOW_ENV.items() if key not in other}

    def matrix_entry(self) -> dict[str, str]:
        """The job's row in the workflow's ``strategy.matrix.include``."""
        return {
            "name": self.name,
            "label": self.label,
            "variant": self.variant_string,
            "runner": self.runner,
            "arch": self.family,
            "image": self.image,
            "build": self.build_identifiers,
            "config_settings": self.config_settings_text,
            "before_all": self.before_all,
            "environment": self.container_environment,
            "repair": self.repair,
        }

    def to_json(self) -> dict[str, Any]:
        """One object per job for CI systems other than GitHub Actions."""
        return {
            "name": self.name,
            "entry": self.entry,
            "label": self.label,
            "variant": self.variant.to_json(),
            "variant_string": self.variant_string,
            "platform": "linux",
            "arch": self.family,
            "runner": self.runner,
            "image": self.image,
            "pythons": list(self.pythons),
            "recipes": list(self.recipes),
            "auditwheel_excludes": list(self.auditwheel_excludes),
            "isa_check": self.isa_check,
            "config_settings": self.config_settings,
            "environment": self.environment(),
        }


#: Workflow env var -> matrix field; the same mapping resolves ``environment()``.
WORKFLOW_ENV = {
    "CIBW_BUILD": "build",
    "CIBW_ARCHS_LINUX": "arch",
    "CIBW_MANYLINUX_X86_64_IMAGE": "image",
    "CIBW_MANYLINUX_AARCH64_IMAGE": "image",
    "CIBW_CONFIG_SETTINGS_LINUX": "config_settings",
    "CIBW_BEFORE_ALL_LINUX": "before_all",
    "CIBW_ENVIRONMENT_LINUX": "environment",
    "CIBW_REPAIR_WHEEL_COMMAND_LINUX": "repair",
}


# ------------------------------------------------------------------ expansion
def recipes_for(variant: Variant, catalog: Catalog) -> tuple[str, ...]:
    """The manylinux recipes (recipes/<dep>/manylinux.sh) a variant's build needs."""
    needed = (["cuda"] if variant.get("cuda", "none") != "none" else []) + list(catalog.libraries_of(variant))
    return tuple(f"recipes/{dep}/manylinux.sh" for dep in needed)


def excludes_for(variant: Variant, catalog: Catalog) -> tuple[str, ...]:
    """auditwheel --exclude sonames: what the wheel links but the host provides."""
    out: list[str] = []
    cuda = str(variant.get("cuda", "none"))
    if cuda != "none":
        out += [*CUDA_EXCLUDES, f"libcudart.so.{cuda}"]
    uses = catalog.libraries_of(variant)
    if "nccl" in uses:
        out += NCCL_EXCLUDES
    if "mpi" in uses:
        out += MPI_EXCLUDES
    return tuple(out)


def make_job(
    entry: str, variant: Variant, catalog: Catalog, pythons: Sequence[str], deps_prefix: str | None = None
) -> Job:
    """The job for one variant (already checked by the catalog); a family without a CI runner is an InputError.

    ``deps_prefix``: where the recipes install dependencies (default: the project's ``ci-deps-prefix``)."""
    target = str(variant["target"])
    family = catalog.target_family[target]
    where = f"prebuilt entry {entry!r}"
    if family not in RUNNERS:
        raise InputError(
            f"{where}: no CI runner builds {family} targets ({target}); runners exist for {', '.join(RUNNERS)}"
        )
    cuda = str(variant.get("cuda", "none"))
    toolkit = None
    if cuda == "none":
        image = CPU_IMAGES[family]
    else:
        toolkit = catalog.cuda_lines[cuda].toolkit  # its archs were checked when the catalog loaded
        image = CUDA_IMAGES[family].format(toolkit=toolkit)
    return Job(
        entry=entry,
        variant=variant,
        family=family,
        runner=RUNNERS[family],
        image=image,
        pythons=tuple(pythons),
        recipes=recipes_for(variant, catalog),
        auditwheel_excludes=excludes_for(variant, catalog),
        isa_check=target in BASELINE_TARGETS,
        cuda_toolkit=toolkit,
        deps_prefix=load_project().ci_deps_prefix if deps_prefix is None else deps_prefix,
    )


def select_entries(catalog: Catalog, names: Iterable[str] = ()) -> list[tuple[str, Variant]]:
    """(entry name, variant) for the named prebuilt entries, or all of them."""
    wanted = list(names)
    known = {e.name: e for e in catalog.prebuilt}
    for name in wanted:
        if name not in known:
            raise unknown_choice("prebuilt entry", name, known)
    out: list[tuple[str, Variant]] = []
    seen: set[Variant] = set()
    for entry in catalog.prebuilt:
        if wanted and entry.name not in wanted:
            continue
        for v in entry.variants:
            if v not in seen:
                seen.add(v)
                out.append((entry.name, v))
    return out


def restrict_to(
    selection: list[tuple[str, Variant]], variants: Iterable[Variant], catalog: Catalog, *, source: str
) -> list[tuple[str, Variant]]:
    """Keep the selection's variants that ``variants`` lists; others become source-only jobs.

    A planned variant outside the prebuilt matrix is still built (a plan may ask
    for it); it gets the entry name ``plan``.
    """
    wanted = list(dict.fromkeys(variants))
    by_variant = {v: name for name, v in selection}
    out = [(by_variant.get(v, "plan"), v) for v in wanted]
    for _, v in out:
        catalog.check(v)
    if not out:
        raise InputError(f"{source}: selects no variant; nothing to build")
    return out


def expand(
    catalog: Catalog,
    selection: list[tuple[str, Variant]] | None = None,
    pythons: Sequence[str] = DEFAULT_PYTHONS,
    limit: int = GITHUB_MATRIX_LIMIT,
) -> list[Job]:
    """Every job of the matrix, in catalog order, checked against the job limit."""
    if selection is None:
        selection = select_entries(catalog)
    if not selection:
        raise InputError(
            f"{catalog.path}: the selection has no prebuilt variant; add [[prebuilt]] entries or name existing ones"
        )
    for py in pythons:
        if not re.fullmatch(r"cp3\d+t?", py):
            raise InputError(f"python {py!r} is not a CPython build tag like cp312")
    jobs = []
    for entry, variant in selection:
        jobs.append(make_job(entry, variant, catalog, pythons))
        if len(jobs) > limit:
            counts: dict[str, int] = {}
            for name, _ in selection:
                counts[name] = counts.get(name, 0) + 1
            raise InputError(
                f"prebuilt entry {entry!r} takes the matrix past {limit} jobs (GitHub's limit per "
                f"matrix; the selection has {len(selection)}: "
                + ", ".join(f"{n}={c}" for n, c in counts.items())
                + "); restrict it with --entry NAME or --plan PLAN.json, or split the catalog"
            )
    return jobs


def jobs_json(jobs: Sequence[Job]) -> str:
    return json.dumps([j.to_json() for j in jobs], indent=2) + "\n"


# ------------------------------------------------------------------ workflow
WORKFLOW_PATH = ".github/workflows/wheels.yml"
CHECKOUT = "actions/checkout@v5"
SETUP_PYTHON = "actions/setup-python@v6"
CIBUILDWHEEL = "pypa/cibuildwheel@v4.3.3"
UPLOAD = "actions/upload-artifact@v6"
DOWNLOAD = "actions/download-artifact@v7"


def workflow(jobs: Sequence[Job], catalog: Catalog, paths: Sequence[str] = ()) -> dict[str, Any]:
    """The GitHub Actions workflow as data (rendered by ``render_yaml``); ``paths``: the pull-request path
    filter (the project's ``ci-paths``; none: every pull request runs it)."""
    setup = [
        {"uses": CHECKOUT},
        {"uses": SETUP_PYTHON, "with": {"python-version": "3.12"}},
        {"name": "Install the selector engine", "run": "python -m pip install packaging archspec pyyaml"},
    ]
    check = {
        "name": "Generated workflow is current",
        "runs-on": "ubuntu-24.04",
        "steps": [
            *setup,
            {
                "name": "Compare with the generator",
                "run": f"python -m selector_backend matrix --format github --check {WORKFLOW_PATH}",
            },
        ],
    }
    build = {
        "name": "${{ matrix.name }}",
        "needs": "check",
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": 180,
        "strategy": {"fail-fast": False, "matrix": {"include": [j.matrix_entry() for j in jobs]}},
        "steps": [
            {"uses": CHECKOUT},
            {
                "name": "Build the variant's wheels with cibuildwheel",
                "uses": CIBUILDWHEEL,
                "env": {key: f"${{{{ matrix.{fld} }}}}" for key, fld in WORKFLOW_ENV.items()},
                "with": {"output-dir": "wheelhouse"},
            },
            {
                "uses": UPLOAD,
                "with": {
                    "name": "wheels-${{ matrix.label }}",
                    "path": "wheelhouse/*.whl",
                    "if-no-files-found": "error",
                },
            },
        ],
    }
    publish = {
        "name": "Publish the variant index",
        "needs": "build",
        "runs-on": "ubuntu-24.04",
        "steps": [
            *setup,
            {"name": "Install the publishing tools", "run": publish_tools_command()},
            # One folder per artifact: every variant's wheel has the same standard name.
            {"uses": DOWNLOAD, "with": {"pattern": "wheels-*", "path": "wheelhouse"}},
            {
                # The sdist (stock pip's entry) embeds the URL the index is served at; the companions
                # (the [horovod] extra's distribution, the variant provider) are built from the checkout.
                "name": "Write the labelled wheels, the sdist, the companions and the PEP 503/691 variant index",
                "env": {"VARIANT_INDEX_URL": "${{ vars.VARIANT_INDEX_URL }}"},
                "run": "python -m selector_backend build-variants --publish-only wheelhouse --index site"
                ' --index-url "$VARIANT_INDEX_URL"',
            },
            {"uses": UPLOAD, "with": {"name": "variant-index", "path": "site", "if-no-files-found": "error"}},
        ],
    }
    return {
        "name": "wheels",
        "on": {
            "push": {"tags": ["v*"]},
            "pull_request": {"paths": list(paths)} if paths else None,
            "workflow_dispatch": None,
        },
        "permissions": {"contents": "read"},
        "jobs": {"check": check, "build": build, "publish": publish},
    }


def publish_tools_command() -> str:
    """The publish job's install line: what ``build-variants --publish-only --index-url`` checks for."""
    import shlex

    from selector_backend.publishing.publish import companion_requirements, publishing_requirements

    needs = publishing_requirements(wheels=False, isolated=False, repair=False, sdist=True)
    needs += companion_requirements(PACKAGE_DIR.parent)
    return "python -m pip install " + " ".join(shlex.quote(n) for n in dict.fromkeys(needs))


HEADER = """\
# GENERATED by `hvd-selector matrix --format github` from {catalog}; do not edit.
# Regenerate: python -m selector_backend matrix --format github -o {path}
# One job per prebuilt variant ({count} jobs; GitHub allows {limit} per matrix).
# The variant reaches the PEP 517 backend as CIBW_CONFIG_SETTINGS variant="..."
# (cibuildwheel overrides can only select on the Python/platform identifier).
"""


def render_workflow(jobs: Sequence[Job], catalog: Catalog, paths: Sequence[str] | None = None) -> str:
    """The workflow file; ``paths`` default to the project's ``ci-paths``."""
    header = HEADER.format(
        catalog=display_path(catalog.path), path=WORKFLOW_PATH, count=len(jobs), limit=GITHUB_MATRIX_LIMIT
    )
    return header + render_yaml(workflow(jobs, catalog, load_project().ci_paths if paths is None else paths))


def display_path(path: Path) -> str:
    """``path`` relative to the source tree when inside it (stable in generated text)."""
    root = PACKAGE_DIR.parent
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:  # an installed copy given a checkout's --catalog: name it as the checkout does
        path = Path(path)
        return f"{path.parent.name}/{path.name}" if path.parent.name == "variants" else path.name


# ------------------------------------------------------------------ YAML
def render_yaml(data: Any) -> str:
    """Block-style YAML in the data's own key order, by PyYAML (the ``ci`` extra): a maintainer's
    tool, so the backend's cold start never pays for it."""
    try:
        import yaml
    except ImportError:
        raise InputError(
            "writing the GitHub workflow needs PyYAML: pip install 'hvd-selector[ci]' (or pyyaml)"
        ) from None

    class WorkflowDumper(yaml.SafeDumper):
        """Lists indented under their key, as GitHub's examples are, and shared steps written out
        in full each time (no ``&anchor``/``*alias``: many YAML readers and people trip on them)."""

        def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
            return super().increase_indent(flow, False)

        def ignore_aliases(self, data: Any) -> bool:
            return True

    def string(dumper: yaml.SafeDumper, text: str) -> Any:
        # PyYAML resolves YAML 1.1, where a label like 12e45678 is a string; GitHub reads YAML 1.2,
        # where it is a float: quote whatever starts like a number
        style = '"' if text[:1].isdigit() or (text[:1] in "+-." and text[1:2].isdigit()) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)

    WorkflowDumper.add_representer(str, string)
    return str(yaml.dump(data, Dumper=WorkflowDumper, sort_keys=False, default_flow_style=False, width=1 << 16))
