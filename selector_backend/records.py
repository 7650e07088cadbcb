"""``NamedTuple`` for the project's typed records, at the price of a plain ``collections.namedtuple``.

Every cold start defines a few dozen record classes. ``typing.NamedTuple``
type-checks each field's annotation, and under ``from __future__ import
annotations`` every annotation is a string that it compiles into a
``ForwardRef``: about 0.2 ms a class, 4 ms of a 60 ms ``resolve``. Nothing
reads those checked annotations, so at run time the class statement here
builds the namedtuple directly and keeps the annotations as written. Type
checkers see ``typing.NamedTuple`` itself, so a record is checked exactly
as before.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

__all__ = ["NamedTuple"]

if TYPE_CHECKING:
    from typing import NamedTuple
else:
    _NOT_COPIED = frozenset({"__module__", "__annotations__", "__orig_bases__"})

    class _RecordMeta(type):
        """Builds ``collections.namedtuple(name, fields, defaults)`` from the class body, as
        ``typing.NamedTuple`` does, then copies the body's methods, docstring and constants."""

        def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            if len(bases) != 1:
                raise TypeError(f"{name}: a record derives from NamedTuple alone")
            annotations = namespace.get("__annotations__", {})
            fields = list(annotations)
            defaults = []
            for field in fields:
                if field in namespace:
                    defaults.append(namespace[field])
                elif defaults:
                    raise TypeError(f"{name}: field {field!r} has no default but follows one that has")
            record = collections.namedtuple(name, fields, defaults=defaults, module=namespace["__module__"])
            record.__annotations__ = annotations
            for key, value in namespace.items():
                if key not in _NOT_COPIED and key not in annotations:
                    setattr(record, key, value)
            return record

    class NamedTuple(metaclass=_RecordMeta):
        """Base of a typed record: ``class Point(NamedTuple): x: int; y: int = 0``."""
