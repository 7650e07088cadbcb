"""``selector_backend.records.NamedTuple`` builds the same records as ``typing.NamedTuple``."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from selector_backend.records import NamedTuple


class Fast(NamedTuple):
    """A record."""

    name: str
    sizes: tuple[int, ...] = ()
    weight: float = 1.0

    def total(self) -> float:
        return sum(self.sizes) * self.weight


class Typed(typing.NamedTuple):
    """A record."""

    name: str
    sizes: tuple[int, ...] = ()
    weight: float = 1.0

    def total(self) -> float:
        return sum(self.sizes) * self.weight


@pytest.mark.parametrize("record", [Fast, Typed])
def test_a_record_behaves_as_a_typed_namedtuple(record: Any) -> None:
    value = record("a", (1, 2), 0.5)
    assert value.total() == 1.5
    assert tuple(value) == ("a", (1, 2), 0.5)
    assert record("b") == ("b", (), 1.0)
    assert value._replace(name="c").name == "c"
    assert record._fields == ("name", "sizes", "weight")
    assert record._field_defaults == {"sizes": (), "weight": 1.0}
    assert record.__doc__ == "A record."
    assert record.__module__ == __name__
    assert repr(record("d")) == f"{record.__name__}(name='d', sizes=(), weight=1.0)"
    assert issubclass(record, tuple)
    with pytest.raises(TypeError):
        record()


def test_annotations_are_kept_as_written_without_evaluating_them() -> None:
    assert Fast.__annotations__ == {"name": "str", "sizes": "tuple[int, ...]", "weight": "float"}


def test_a_field_without_default_after_one_with_default_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' has no default"):

        class Bad(NamedTuple):
            a: int = 0
            b: int  # type: ignore[misc]  # mypy refuses it too


def test_a_record_with_another_base_is_refused() -> None:
    with pytest.raises(TypeError, match="NamedTuple alone"):

        class Mixed(NamedTuple, dict):  # type: ignore[misc]  # mypy refuses it too
            a: int
