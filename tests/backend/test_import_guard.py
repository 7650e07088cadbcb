"""The generated import guard an adopting project's wheel carries (install/import_guard.py).

The guard is run here as the installed package runs it: its text executed as a
module, against a CPU described by a cpuinfo file (archspec's features of a
real microarchitecture, in the kernel's spelling). test_own_project.py checks
it inside a real built wheel, installed by pip, on this machine's CPU.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import archspec.cpu
import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.errors import InputError
from selector_backend.install.import_guard import HOOK, MODULE, guard_members, hooked

from .adopter import CATALOG  # python-xxhash's catalog, as the adopter writes it


def cpuinfo(tmp_path: Path, uarch: str) -> Path:
    """A cpuinfo file for a CPU with ``uarch``'s features (sse3 spelled pni, as the kernel does)."""
    flags = ["fpu", *("pni" if f == "sse3" else f for f in archspec.cpu.TARGETS[uarch].features)]
    path = tmp_path / f"{uarch}.cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {' '.join(flags)}\n\n")
    return path


def guard_of(tmp_path: Path, target: str) -> dict[str, str]:
    (tmp_path / "variants.toml").write_text(CATALOG)
    catalog = load_catalog(tmp_path / "variants.toml")
    variant = catalog.parse_variant({"target": target})
    members = guard_members("xxhash", '"""Fast."""\nfrom ._native import hash\n', variant, catalog)
    return {name: data.decode() for name, data in members.items()}


def run_guard(source: str, cpu: Path) -> None:
    """The guard's module body, with its check pointed at ``cpu`` (as ``import xxhash`` runs it)."""
    namespace: dict[str, object] = {"__name__": f"xxhash.{MODULE}"}
    exec(compile(source.replace("\ncheck()\n", "\n"), MODULE, "exec"), namespace)
    namespace["check"](str(cpu))  # type: ignore[operator]


def test_a_v3_build_on_a_cpu_without_avx2_fails_its_import_in_one_line(tmp_path: Path) -> None:
    members = guard_of(tmp_path, "x86_64_v3")
    with pytest.raises(ImportError) as caught:
        run_guard(members[f"xxhash/{MODULE}.py"], cpuinfo(tmp_path, "nehalem"))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("xxhash: this build targets x86_64_v3 but this CPU lacks abm avx avx2 ")
    command = f"{sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir xxhash==3.5.0"
    assert message.endswith(f"reinstall the build for this machine: {command}"), message


def test_a_cpu_that_has_the_features_imports_and_so_does_an_unreadable_one(tmp_path: Path) -> None:
    source = guard_of(tmp_path, "x86_64_v3")[f"xxhash/{MODULE}.py"]
    run_guard(source, cpuinfo(tmp_path, "haswell"))  # pni counts as sse3
    run_guard(source, tmp_path / "absent")  # not Linux: the guard cannot tell and does not block
    run_guard(guard_of(tmp_path, "x86_64_v2")[f"xxhash/{MODULE}.py"], cpuinfo(tmp_path, "nehalem"))


def test_the_guard_is_stdlib_only_and_hooked_after_the_docstring(tmp_path: Path) -> None:
    members = guard_of(tmp_path, "x86_64")
    imported = {
        alias.name
        for node in ast.walk(ast.parse(members[f"xxhash/{MODULE}.py"]))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported == {"sys", "shlex"}
    assert members["xxhash/__init__.py"] == f'"""Fast."""\n{HOOK}from ._native import hash\n'


def test_future_imports_stay_first_and_hooking_twice_adds_one_line() -> None:
    init = '"""Doc."""\nfrom __future__ import annotations\n\n\n@cache\ndef f() -> None: ...\n'
    once = hooked(init, "p/__init__.py")
    assert once.index("from __future__") < once.index(HOOK) < once.index("@cache")
    assert hooked(once, "p/__init__.py") == once
    compile(once, "p/__init__.py", "exec")


def test_an_init_that_does_not_parse_is_named() -> None:
    with pytest.raises(InputError, match=r"p/__init__.py does not parse .*import guard cannot be hooked"):
        hooked("def (:\n", "p/__init__.py")
