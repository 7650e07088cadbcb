"""``selector_backend.records.NamedTuple`` builds records that behave as ``typing.NamedTuple``'s."""

from __future__ import annotations

import copy
import inspect
import pickle
import typing
from typing import Any

import pytest

from selector_backend.records import NamedTuple


def _record_class(base: Any, name: str) -> Any:
    """The same class statement on either base, named as the module-level name it is kept under."""

    class Record(base):
        """A record."""

        name: str
        sizes: tuple[int, ...] = ()
        weight: float = 1.0

        def total(self) -> float:
            return sum(self.sizes) * self.weight

        @property
        def heavy(self) -> bool:
            return self.weight > 1

    Record.__name__ = Record.__qualname__ = name  # pickle finds it under that name
    return Record


Fast = _record_class(NamedTuple, "Fast")
Typed = _record_class(typing.NamedTuple, "Typed")


class Wide(NamedTuple):  # more fields than the precompiled constructors cover
    f0: int
    f1: int
    f2: int
    f3: int
    f4: int
    f5: int
    f6: int
    f7: int
    f8: int
    f9: int
    f10: int
    f11: int
    f12: int
    f13: int
    f14: int
    f15: int
    f16: int = 16
    f17: int = 17


class Plain(NamedTuple):
    x: int


@pytest.mark.parametrize("record", [Fast, Typed])
def test_a_record_behaves_as_a_typed_namedtuple(record: Any) -> None:
    value = record("a", (1, 2), 2.0)
    assert value.total() == 6.0 and value.heavy
    assert tuple(value) == ("a", (1, 2), 2.0) and issubclass(record, tuple)
    assert record("b") == ("b", (), 1.0) and record(name="b", weight=3) == ("b", (), 3)
    assert hash(record("b")) == hash(("b", (), 1.0))
    assert value._replace(name="c").name == "c" and type(value._replace(name="c")) is record
    assert record._make(["d", (), 1.0]) == record("d")
    assert value._asdict() == {"name": "a", "sizes": (1, 2), "weight": 2.0}
    assert record._fields == ("name", "sizes", "weight") == record.__match_args__
    assert record._field_defaults == {"sizes": (), "weight": 1.0}
    assert record.__doc__ == "A record."
    assert record.__module__ == __name__ and record.__qualname__ == record.__name__
    assert repr(record("d")) == f"{record.__name__}(name='d', sizes=(), weight=1.0)"
    assert list(inspect.signature(record).parameters) == ["name", "sizes", "weight"]
    assert pickle.loads(pickle.dumps(value)) == value and type(pickle.loads(pickle.dumps(value))) is record
    assert copy.deepcopy(value) == value and copy.copy(value) is not None
    assert not hasattr(value, "__dict__")
    match value:
        case record(name, sizes, weight):
            assert (name, sizes, weight) == ("a", (1, 2), 2.0)
    with pytest.raises(TypeError):
        record()
    with pytest.raises(TypeError):
        record("a", nope=1)
    with pytest.raises(TypeError):
        record._make(["a"])
    with pytest.raises(ValueError, match="unexpected field names"):
        value._replace(nope=1)
    with pytest.raises(AttributeError):
        value.name = "x"


def test_annotations_are_kept_as_written_without_evaluating_them() -> None:
    assert Fast.__annotations__ == {"name": "str", "sizes": "tuple[int, ...]", "weight": "float"}


def test_records_of_any_width() -> None:
    wide = Wide(*range(16))
    assert tuple(wide) == tuple(range(18)) and wide.f15 == 15 and wide.f17 == 17
    assert Wide(
        *range(18),
    ) == Wide(**{f"f{i}": i for i in range(18)})
    assert Plain(1) == (1,) and Plain(x=2).x == 2 and Plain.__doc__ == "Plain(x)"


def test_bad_records_are_refused_as_typing_refuses_them() -> None:
    with pytest.raises(TypeError, match="'b' has no default"):

        class Bad(NamedTuple):
            a: int = 0
            b: int  # type: ignore[misc]  # mypy refuses it too

    with pytest.raises(TypeError, match="NamedTuple alone"):

        class Mixed(NamedTuple, dict):  # type: ignore[misc]  # mypy refuses it too
            a: int

    with pytest.raises(ValueError, match="underscore"):

        class Private(NamedTuple):
            _a: int  # type: ignore[misc]  # mypy refuses it too
