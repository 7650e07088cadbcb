"""``NamedTuple`` for the project's typed records, without the price of defining one.

Every cold start defines a few dozen record classes, and defining them was
the largest share of the project's own start-up: ``typing.NamedTuple``
compiles each string annotation into a ``ForwardRef``, then
``collections.namedtuple`` compiles a fresh ``__new__`` from source for each
class (about 0.5 million instructions a class, 5 % of a ``resolve``). Here a
record's class statement builds the same kind of class from parts made
once: the methods every record shares live on one base, and ``__new__`` is
the compiled constructor of the record's arity with its parameters renamed
(``CodeType.replace``), so keyword arguments and defaults work as before.

Type checkers see ``typing.NamedTuple`` itself, so a record is checked as one;
``tests/engine/test_records.py`` holds the two to the same behaviour.
"""

from __future__ import annotations

import sys
from types import FunctionType
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["NamedTuple"]

if TYPE_CHECKING:
    from typing import NamedTuple
else:
    try:
        from _collections import _tuplegetter  # what collections.namedtuple uses: a C descriptor
    except ImportError:  # another Python implementation
        from operator import itemgetter

        def _tuplegetter(index: int, doc: str) -> Any:
            return property(itemgetter(index), doc=doc)

    _NOT_COPIED = frozenset({"__module__", "__annotations__", "__orig_bases__", "__classcell__"})
    _tuple_new = tuple.__new__
    # One constructor per number of fields, compiled with this module (so cached in its .pyc):
    # a record's __new__ is the one of its arity with the parameters renamed.
    _NEW_BY_ARITY: list[Any] = [
        lambda _cls: _tuple_new(_cls, ()),
        lambda _cls, _0: _tuple_new(_cls, (_0,)),
        lambda _cls, _0, _1: _tuple_new(_cls, (_0, _1)),
        lambda _cls, _0, _1, _2: _tuple_new(_cls, (_0, _1, _2)),
        lambda _cls, _0, _1, _2, _3: _tuple_new(_cls, (_0, _1, _2, _3)),
        lambda _cls, _0, _1, _2, _3, _4: _tuple_new(_cls, (_0, _1, _2, _3, _4)),
        lambda _cls, _0, _1, _2, _3, _4, _5: _tuple_new(_cls, (_0, _1, _2, _3, _4, _5)),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6: _tuple_new(_cls, (_0, _1, _2, _3, _4, _5, _6)),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7: _tuple_new(_cls, (_0, _1, _2, _3, _4, _5, _6, _7)),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8: _tuple_new(_cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8)),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9: _tuple_new(_cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9)),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10)
        ),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11)
        ),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12)
        ),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13)
        ),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14)
        ),
        lambda _cls, _0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15: _tuple_new(
            _cls, (_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15)
        ),
    ]

    def _constructor(fields: tuple[str, ...], defaults: tuple[Any, ...], qualname: str) -> FunctionType:
        """``__new__(_cls, <fields>)``: the constructor of this many fields, given these names."""
        if len(fields) >= len(_NEW_BY_ARITY):  # rare: compile one
            params = "".join(f", _{i}" for i in range(len(fields)))
            scope: dict[str, Any] = {"_tuple_new": _tuple_new}
            exec(f"def __new__(_cls{params}):\n    return _tuple_new(_cls, ({params[2:]},))\n", scope)
            template = scope["__new__"]
        else:
            template = _NEW_BY_ARITY[len(fields)]
        code = template.__code__.replace(
            co_varnames=("_cls", *fields), co_name="__new__", co_qualname=f"{qualname}.__new__"
        )
        return FunctionType(code, template.__globals__, "__new__", defaults or None)

    class _Record(tuple):
        """What every record shares (``collections.namedtuple`` writes these anew for each class)."""

        __slots__ = ()
        _fields: tuple[str, ...] = ()
        _field_defaults: ClassVar[dict[str, Any]] = {}

        @classmethod
        def _make(cls, iterable: Any) -> Any:
            result = tuple.__new__(cls, iterable)
            if len(result) != len(cls._fields):
                raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
            return result

        def _replace(self, /, **changes: Any) -> Any:
            result = self._make(map(changes.pop, self._fields, self))
            if changes:
                raise ValueError(f"Got unexpected field names: {list(changes)!r}")
            return result

        def __repr__(self) -> str:
            inner = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
            return f"{type(self).__name__}({inner})"

        def _asdict(self) -> dict[str, Any]:
            return dict(zip(self._fields, self, strict=True))

        def __getnewargs__(self) -> tuple[Any, ...]:
            return tuple(self)

    class _RecordMeta(type):
        """Turns ``class Point(NamedTuple): x: int; y: int = 0`` into a record class."""

        def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            if len(bases) != 1:
                raise TypeError(f"{name}: a record derives from NamedTuple alone")
            annotations = namespace.get("__annotations__", {})
            fields = tuple(annotations)
            defaults: list[Any] = []
            for field in fields:
                if field.startswith("_"):
                    raise ValueError(f"{name}: field names cannot start with an underscore: {field!r}")
                if field in namespace:
                    defaults.append(namespace[field])
                elif defaults:
                    raise TypeError(f"{name}: field {field!r} has no default but follows one that has")
            qualname = namespace.get("__qualname__", name)
            body = {key: value for key, value in namespace.items() if key not in _NOT_COPIED and key not in fields}
            body.setdefault("__doc__", f"{name}({', '.join(fields)})")
            body.update(
                __slots__=(),
                __module__=namespace.get("__module__", __name__),
                __annotations__=annotations,
                __match_args__=fields,
                _fields=fields,
                _field_defaults=dict(zip(fields[len(fields) - len(defaults) :], defaults, strict=True)),
                __new__=_constructor(fields, tuple(defaults), qualname),
            )
            for index, field in enumerate(fields):
                body[field] = _tuplegetter(index, sys.intern(f"Alias for field number {index}"))
            return type(name, (_Record,), body)

    class NamedTuple(metaclass=_RecordMeta):
        """Base of a typed record: ``class Point(NamedTuple): x: int; y: int = 0``."""
