"""Spack spec strings: the subset a build-cache entry or a user's spec uses.

``py-horovod@0.28.1 +cuda cuda_arch=80 controllers:=mpi target=x86_64_v3
%gcc@13.2.0 ^cuda@12.4`` parses into a ``SpackSpec`` and prints back. The
``name=value``, ``name:=value`` and ``name==value`` forms all mean the same
value here (``:=`` is Spack's exact form, ``==`` propagates to dependencies,
neither changes what the binary is); ``:=`` is remembered so the spec prints
back with it. Anything else is an InputError naming
the spec and the column, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from selector_backend.errors import InputError

#: ``True``/``False`` for ``+flag``/``~flag``; a tuple for ``name=a,b``.
SpackValue = bool | tuple[str, ...]

ARCH_KEYS = ("platform", "os", "target")

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_\-]*"
_VALUE = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_.\-,:/+@*]+)"
_TOKEN = re.compile(
    rf"""
    (?P<ws>\s+)
  | (?P<dep>\^)
  | (?P<compiler>%{{1,2}}\s*(?P<compiler_name>{_NAME})(?:@(?P<compiler_version>=?[A-Za-z0-9_.\-:,]+))?)
  | (?P<hash>/[a-z0-9]+)
  | (?P<version>@=?[A-Za-z0-9_.\-:,]+)
  | (?P<flag>(?P<sign>\+\+|\+|~~|~|(?<![^\s])-)(?P<flag_name>{_NAME}))
  | (?P<kv>(?P<key>{_NAME})(?P<op>==|:=|=)(?P<value>{_VALUE})?)
  | (?P<name>{_NAME})
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class SpackSpec:
    """One node of a spec plus the dependency nodes written after it with ``^``."""

    name: str | None = None
    version: str | None = None
    variants: tuple[tuple[str, SpackValue], ...] = ()
    platform: str | None = None
    os: str | None = None
    target: str | None = None
    compiler: str | None = None
    hash: str | None = None
    dependencies: tuple[SpackSpec, ...] = field(default=())
    #: Variants written ``name:=value``: Spack takes exactly these values, never more. Printed
    #: back that way, but no part of equality: the value is the same.
    exact: tuple[str, ...] = field(default=(), compare=False)

    def variant(self, name: str) -> SpackValue | None:
        for key, value in self.variants:
            if key == name:
                return value
        return None

    def dependency(self, name: str) -> SpackSpec | None:
        return next((d for d in self.dependencies if d.name == name), None)

    def __str__(self) -> str:
        return format_spec(self)


def format_value(value: SpackValue, name: str, exact: bool = False) -> str:
    if isinstance(value, bool):
        return f"{'+' if value else '~'}{name}"
    return f"{name}{':=' if exact else '='}{','.join(value)}"


def format_spec(spec: SpackSpec) -> str:
    """Spack syntax, space separated: name@version variants arch %compiler ^deps."""
    head = (spec.name or "") + (f"@{spec.version}" if spec.version else "")
    parts = [head] if head else []
    parts += [format_value(v, k, k in spec.exact) for k, v in spec.variants]
    parts += [f"{key}={getattr(spec, key)}" for key in ARCH_KEYS if getattr(spec, key)]
    if spec.compiler:
        parts.append(f"%{spec.compiler}")
    if spec.hash:
        parts.append(f"/{spec.hash}")
    parts += [f"^{format_spec(dep)}" for dep in spec.dependencies]
    return " ".join(parts)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _values(raw: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); 'true'/'false' of a bool variant stay strings here."""
    return tuple(v for v in (p.strip() for p in _unquote(raw).split(",")) if v)


class _Builder:
    """Accumulates one node; rejects a key given twice."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.fields: dict[str, str | None] = {}
        self.variants: dict[str, SpackValue] = {}
        self.exact: list[str] = []

    def set_field(self, key: str, value: str) -> None:
        if self.fields.get(key) is not None:
            raise InputError(f"{self.where}: {key} given twice")
        self.fields[key] = value

    def set_variant(self, key: str, value: SpackValue) -> None:
        if key in self.variants:
            raise InputError(f"{self.where}: variant {key} given twice")
        self.variants[key] = value

    def build(self) -> SpackSpec:
        f = self.fields
        return SpackSpec(
            name=f.get("name"),
            version=f.get("version"),
            variants=tuple(self.variants.items()),
            platform=f.get("platform"),
            os=f.get("os"),
            target=f.get("target"),
            compiler=f.get("compiler"),
            hash=f.get("hash"),
            exact=tuple(self.exact),
        )


def _tokens(text: str, where: str) -> Iterator[re.Match[str]]:
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise InputError(
                f"{where}: cannot parse {text[pos : pos + 20]!r} at column {pos + 1}; "
                "expected name@version, +flag, ~flag, name=value, %compiler or ^dependency"
            )
        pos = match.end()
        if not match.group("ws"):
            yield match


def _apply_kv(node: _Builder, key: str, raw: str, where: str, exact: bool = False) -> None:
    value = _unquote(raw)
    if not value:
        raise InputError(f"{where}: {key}= has no value")
    if key == "arch":
        parts = value.split("-", 2)
        if len(parts) != 3 or not all(parts):
            raise InputError(f"{where}: arch={value} is not platform-os-target")
        for k, v in zip(ARCH_KEYS, parts, strict=True):
            node.set_field(k, v)
    elif key in ARCH_KEYS:
        node.set_field(key, value)
    else:
        values = _values(raw)
        if not values:
            raise InputError(f"{where}: {key}= has no value")
        node.set_variant(key, values)
        if exact:
            node.exact.append(key)


def parse_spec(text: str, where: str | None = None) -> SpackSpec:
    """Parse one spec (with ``^`` dependencies) or raise a one-line InputError."""
    where = where or f"spec {text!r}"
    nodes: list[_Builder] = [_Builder(where)]
    expect_name = False
    for tok in _tokens(text, where):
        node = nodes[-1]
        if tok.group("dep"):
            if expect_name:
                raise InputError(f"{where}: '^' must be followed by a package name")
            nodes.append(_Builder(where))
            expect_name = True
            continue
        if expect_name and not tok.group("name"):
            raise InputError(f"{where}: '^' must be followed by a package name")
        if tok.group("name") and tok.group("kv") is None:
            if node.fields or node.variants:
                raise InputError(
                    f"{where}: unexpected name {tok.group('name')!r} (one package per spec; use ^name for a dependency)"
                )
            node.set_field("name", tok.group("name"))
            expect_name = False
        elif tok.group("version"):
            node.set_field("version", tok.group("version")[1:])
        elif tok.group("flag"):
            sign, name = tok.group("sign"), tok.group("flag_name")
            node.set_variant(name, sign.startswith("+"))
        elif tok.group("kv"):
            _apply_kv(node, tok.group("key"), tok.group("value") or "", where, tok.group("op") == ":=")
        elif tok.group("compiler"):
            version = tok.group("compiler_version")
            node.set_field("compiler", tok.group("compiler_name") + (f"@{version}" if version else ""))
        elif tok.group("hash"):
            node.set_field("hash", tok.group("hash")[1:])
    if expect_name:
        raise InputError(f"{where}: '^' must be followed by a package name")
    root = nodes[0].build()
    return replace(root, dependencies=tuple(n.build() for n in nodes[1:]))


def parse_variant_string(text: str, where: str) -> tuple[str, SpackValue]:
    """One build-cache variant string (``+cuda``, ``controllers:=mpi``) -> (name, value)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: variant {text!r} is not a non-empty string")
    bad = InputError(f"{where}: variant {text!r} is not +name, ~name, name=value or name:=value")
    try:
        tokens = list(_tokens(text.strip(), where))
    except InputError:
        raise bad from None
    if len(tokens) != 1 or not (tokens[0].group("flag") or tokens[0].group("kv")):
        raise bad
    tok = tokens[0]
    if tok.group("flag"):
        return tok.group("flag_name"), tok.group("sign").startswith("+")
    values = _values(tok.group("value") or "")
    if not values:
        raise InputError(f"{where}: variant {text!r} has no value")
    return tok.group("key"), values
