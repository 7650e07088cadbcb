"""``import horovod.torch as hvd`` answered by hvd-selector, only where no real Horovod is installed.

This distribution's .pth file calls install() when Python starts. It adds two
finders and nothing else (hvd_selector and torch load only when a program
imports horovod):

- one at the END of sys.meta_path answers ``import horovod``. The import
  system asks it only after every other finder, the path-based one that
  finds installed packages included, found no ``horovod``: a real Horovod
  always wins.
- one at the front answers ``horovod.<name>`` only while ``horovod`` is
  this layer's module: ``horovod.torch`` (and its submodules) are
  hvd_selector.torch's own modules, so every name refers to one copy and
  ``hvd.__name__`` says ``hvd_selector.torch``. Other frameworks
  (horovod.tensorflow ...) are a ModuleNotFoundError saying so.

``horovod.__version__`` is the Horovod API level with hvd-selector's release
as a PEP 440 local label (``0.28.1+hvdselector.0.1.0``): it compares as
0.28.1 and says what is installed.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

# Every Python start in the environment runs this module (the .pth file), so it imports only what the
# interpreter has loaded already: the finders and loaders follow the import system's protocols and
# derive from importlib.abc's classes for type checkers alone (importing importlib.abc imports
# importlib.resources, which would make every start in the environment 2-3x a bare interpreter's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader, MetaPathFinder
    from typing import Any
else:
    Loader = MetaPathFinder = object

HOROVOD_API = "0.28.1"  # the last Horovod release, whose horovod.torch hvd_selector.torch follows
TORCH_MODULES = ("mpi_ops", "compression", "functions", "optimizer", "sync_batch_norm", "elastic")
PROVIDED = (
    {"horovod.torch": "hvd_selector.torch"}
    | {f"horovod.torch.{name}": f"hvd_selector.torch.{name}" for name in TORCH_MODULES}
    | {"horovod.runner": "hvd_selector_horovod.runner"}
    | {"horovod.ray": "hvd_selector.ray"}  # RayExecutor (needs Ray installed)
)


def _version() -> str:
    """Horovod's API level + hvd-selector's release as a local label (hvd_selector loads on first use)."""
    release = importlib.import_module("hvd_selector.buildmix").release()
    return f"{HOROVOD_API}+hvdselector." + "".join(c if c.isalnum() else "." for c in release.lower()).strip(".")


def _attribute(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name == "run":  # Horovod's horovod.run(func, np=...) (runner.py)
        return importlib.import_module("hvd_selector_horovod.runner").run
    raise AttributeError(f"module 'horovod' (hvd-selector's Horovod layer) has no attribute {name!r}")


class _TopLoader(Loader):
    """Makes the ``horovod`` package: a version, a docstring, no code of its own."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, __doc__)
        module.__getattr__ = _attribute  # type: ignore[method-assign]  # PEP 562: __version__ on first use
        module.__hvd_selector__ = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _AliasLoader(Loader):
    """``horovod.torch[.x]`` is hvd_selector.torch[.x] itself (one module object, one engine)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set horovod.*'s spec on it: give it back its own


def _ours() -> bool:
    return getattr(sys.modules.get("horovod"), "__hvd_selector__", False) is True


class TopFinder(MetaPathFinder):
    """Last on sys.meta_path: ``horovod`` when nothing else found one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "horovod":
            return None
        return importlib.machinery.ModuleSpec("horovod", _TopLoader(), is_package=True)


class SubFinder(MetaPathFinder):
    """First on sys.meta_path: ``horovod.*`` while ``horovod`` is this layer's."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("horovod.") or not _ours():
            return None
        if fullname in PROVIDED:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(PROVIDED[fullname]))
        raise ModuleNotFoundError(
            f"{fullname} is not part of hvd-selector's Horovod layer (it provides horovod.torch and horovod.ray); "
            "install Horovod itself for it",
            name=fullname,
        )


def install() -> None:
    """Add the two finders once (the .pth file calls this at start-up)."""
    if any(isinstance(f, TopFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, SubFinder())
    sys.meta_path.append(TopFinder())
