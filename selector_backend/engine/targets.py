"""CPU targets through archspec: ancestry, specificity, flags, features.

Everything CPU-related the other modules need, in one place, so the Spack rule
("a binary for X runs on Y iff X == Y or X is an ancestor of Y") is written
once. archspec is imported lazily: the import is most of a cold start.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from selector_backend.errors import InputError, unknown_choice
from selector_backend.vendored import import_module

if TYPE_CHECKING:
    from archspec.cpu import Microarchitecture


@functools.cache
def _targets() -> dict[str, Microarchitecture]:
    return dict(import_module("archspec.cpu").TARGETS)


def microarchitecture(name: str) -> Microarchitecture:
    """The archspec object for ``name``; an unknown name is an InputError."""
    targets = _targets()
    if name not in targets:
        raise unknown_choice("CPU target", name, targets, listed_by=LIST_TARGETS)
    return targets[name]


#: The command that prints every CPU target name (errors about a name point to it).
LIST_TARGETS = "hvd-selector detect --targets"


def target_names_by_family() -> dict[str, list[str]]:
    """Every archspec microarchitecture name, grouped by family, each group from generic to specific."""
    groups: dict[str, list[Microarchitecture]] = {}
    for target in _targets().values():
        groups.setdefault(str(target.family.name), []).append(target)
    return {
        family: [str(t.name) for t in sorted(members, key=lambda t: (len(t.ancestors), str(t.name)))]
        for family, members in sorted(groups.items())
    }


def known_target(name: str) -> bool:
    return name in _targets()


def runs_on(binary_target: str, host_target: str) -> bool:
    """Spack's rule: equal, or the binary's target is an ancestor of the host's."""
    return cpu_verdict(binary_target, host_target)[0]


def cpu_verdict(binary_target: str, host_target: str) -> tuple[bool, str]:
    """The one CPU rule, as (runs, why): every consumer asks this, the import guard included.

    ``host_target`` is the host's archspec microarchitecture (detected, or from
    a profile). Ancestry is the rule; the missing features only explain a no.
    """
    targets = _targets()
    if binary_target not in targets:
        return False, f"target {binary_target} is not an archspec microarchitecture"
    if host_target not in targets:
        return False, f"host cpu {host_target} is not an archspec microarchitecture"
    binary, host = targets[binary_target], targets[host_target]
    fam, host_fam = str(binary.family.name), str(host.family.name)
    if fam != host_fam:
        return False, f"target {binary_target} is {_article(fam)} {fam} target; host {host_target} is {host_fam}"
    if binary_target == host_target:
        return True, f"target {binary_target} is the host microarchitecture"
    if any(a.name == binary_target for a in host.ancestors):
        return True, f"target {binary_target} is an ancestor of host {host_target}"
    missing = sorted(set(binary.features) - set(host.features))
    lacks = f" (host lacks {', '.join(missing)})" if missing else ""
    return False, f"target {binary_target} is not an ancestor of host {host_target}{lacks}"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" or word.startswith("x86") else "a"


def specificity(name: str) -> int:
    """How specific a target is (number of ancestors): higher is better."""
    return len(microarchitecture(name).ancestors)


def family(name: str) -> str:
    return str(microarchitecture(name).family.name)


def generic(name: str) -> str:
    """The generic level (x86_64_v3, aarch64 ...) a microarchitecture belongs to."""
    return str(microarchitecture(name).generic.name)


def features(name: str) -> frozenset[str]:
    """Every feature a target needs, inherited ones included."""
    return frozenset(microarchitecture(name).features)


def optimization_flags(name: str, compiler: str, version: str) -> str:
    """archspec's flags for ``name`` with ``compiler@version`` ('' if none).

    ``compiler`` is archspec's name (gcc, clang, apple-clang, oneapi, nvhpc).
    An unsupported combination is an InputError naming both.
    """
    archspec_cpu = import_module("archspec.cpu")
    try:
        return str(microarchitecture(name).optimization_flags(compiler, version))
    except archspec_cpu.UnsupportedMicroarchitecture as exc:
        raise InputError(f"cannot compile for target {name} with {compiler}@{version}: {exc}") from None


def compiler_name_for_cmake(cmake_compiler_id: str) -> str:
    """archspec's compiler name for a CMake compiler id (GNU -> gcc ...)."""
    mapping = {
        "GNU": "gcc",
        "Clang": "clang",
        "AppleClang": "apple-clang",
        "IntelLLVM": "oneapi",
        "NVHPC": "nvhpc",
    }
    if cmake_compiler_id not in mapping:
        raise unknown_choice("compiler id", cmake_compiler_id, mapping)
    return mapping[cmake_compiler_id]
