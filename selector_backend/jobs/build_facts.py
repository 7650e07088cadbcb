"""What the installed ``hvd_selector`` build is: its variant.json and build_config.json.

Both come from the build description Python computed for the build
(``selector_backend.install.cmake_config``) and sit next to the extension the
same CMake run compiled, so they describe what was compiled; CMake adds to
build_config.json only what it found (mpiexec, Gloo version). Reading them
needs no native code and does not import ``hvd_selector`` (whose
``__init__`` runs the guard and loads ``_core``), which is what lets the guard
run first and the launcher run on a host whose CPU the build does not fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMESPACE = "hvd_selector"


@dataclass(frozen=True)
class BuildFacts:
    """The variant's axis values plus static build facts."""

    label: str
    axes: dict[str, tuple[str, ...]]
    config: dict[str, str]

    def axis(self, name: str) -> tuple[str, ...]:
        return self.axes.get(name, ())

    @property
    def target(self) -> str:
        return self.axis("target")[0]

    @property
    def tensor_ops(self) -> str:
        return self.axis("tensor_ops")[0]

    @property
    def controllers(self) -> tuple[str, ...]:
        return self.axis("controllers")

    @property
    def cuda_archs(self) -> tuple[str, ...]:
        return tuple(a for a in self.axis("cuda_arch") if a != "none")


# What each controller / tensor_ops value puts into a build, as build-info and doctor report it.
# ``gloo`` is the value users type (Horovod's and Spack's word); the core links no Gloo library:
# its gloo controller is the core's own authenticated TCP mesh (docs/reference/transport.md).
NETWORK_TRANSPORT = {"gloo": "tcp", "mpi": "mpi"}
CONTAINS = {
    "gloo": "TCP (the gloo controller; no Gloo library)",
    "mpi": "MPI",
    "nccl": "NCCL",
}


def network_transport(controllers: tuple[str, ...]) -> str:
    """How ranks that share no memory exchange data: ``tcp``, ``mpi`` or ``tcp,mpi`` (one per controller)."""
    return ",".join(NETWORK_TRANSPORT.get(c, c) for c in controllers)


def contents(tensor_ops: str, controllers: tuple[str, ...]) -> str:
    """One line naming what a build contains, e.g. ``tensor operations and controller: TCP (...)``."""
    names = ", ".join(CONTAINS.get(c, c) for c in controllers)
    if controllers == (tensor_ops,):
        return f"tensor operations and controller: {names}"
    ops = CONTAINS.get(tensor_ops, tensor_ops)
    if tensor_ops == "nccl":  # CPU tensors of an NCCL build go over the controller's network
        ops += " (CPU tensors over the controller's network)"
    return f"tensor operations: {ops}; controllers: {names}"


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ImportError(  # hvd_selector adds the command that reinstalls it
            f"hvd_selector: {path.name} is missing from {path.parent}; this is not an installed build"
        ) from None
    except ValueError as exc:
        raise ImportError(f"hvd_selector: {path} is not valid JSON ({exc}); reinstall hvd-selector") from None


MULTI_AXES = ("controllers", "frameworks")


def _axes(features: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Axis values from variant.json's features: the current single-valued model, or an older release's lists.

    The property model is ``selector_backend.engine.variant_json``'s (``cuda :: cu12_sm80_sm90``,
    ``controllers :: gloo_mpi``); decoded here without importing the engine.
    """
    raw = {str(k): [str(v) for v in (vals if isinstance(vals, list) else [vals])] for k, vals in features.items()}
    if "cuda_arch" in raw:  # schema v0.0.3: axis -> values, 'none' sentinels
        return {k: tuple(v) for k, v in raw.items()}
    axes = {k: tuple(v[0].split("_")) if k in MULTI_AXES else tuple(v) for k, v in raw.items()}
    cuda = raw.get("cuda", ["none"])[0]
    line, _, archs = cuda.partition("_sm")
    axes["cuda"] = (line.removeprefix("cu"),) if archs else ("none",)
    axes["cuda_arch"] = tuple(archs.split("_sm")) if archs else ("none",)
    return axes


def runtime_package_dir() -> Path:
    """The installed ``hvd_selector`` directory, found without importing (running) the package."""
    import importlib.util

    spec = importlib.util.find_spec("hvd_selector")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("hvd_selector is not installed: pip install hvd-selector")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def load_facts(package_dir: Path | None = None) -> BuildFacts:
    """Read variant.json (PEP 825 shape) and build_config.json; ImportError if broken."""
    package_dir = runtime_package_dir() if package_dir is None else package_dir
    data = _load_json(package_dir / "variant.json")
    variants = data.get("variants") if isinstance(data, dict) else None
    if not isinstance(variants, dict) or len(variants) != 1:
        raise ImportError(f"hvd_selector: {package_dir / 'variant.json'} must hold exactly one variant")
    ((label, namespaces),) = variants.items()
    config_path = package_dir / "build_config.json"
    config = _load_json(config_path) if config_path.exists() else {}
    variant = config.get("variant") if isinstance(config, dict) else None
    if isinstance(variant, str) and variant:  # every axis, as the build description wrote it
        axes = {k: tuple(v.split(",")) for k, _, v in (word.partition("=") for word in variant.split())}
    else:  # a build of an earlier release: its variant.json held every axis in our namespace
        features = namespaces.get(NAMESPACE) if isinstance(namespaces, dict) else None
        if not isinstance(features, dict) or "target" not in features:
            raise ImportError(f"hvd_selector: variant.json has no {NAMESPACE!r} target entry")
        axes = _axes(features)
    return BuildFacts(label=str(label), axes=axes, config={str(k): str(v) for k, v in config.items()})
