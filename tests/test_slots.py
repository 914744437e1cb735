"""lionexec._slots: assigning a frozen attrs instance's slots through their own descriptors."""

from __future__ import annotations

import attrs
import pytest

from lionexec._slots import slot_setters


@attrs.frozen
class Base:
    a: int


@attrs.frozen
class Child(Base):
    b: int


def test_setters_assign_own_and_inherited_slots_of_a_frozen_class() -> None:
    set_a, set_b = slot_setters(Child, "a", "b")
    child = object.__new__(Child)
    set_a(child, 1)
    set_b(child, 2)
    assert child == Child(a=1, b=2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        child.a = 3  # type: ignore[misc]


@pytest.mark.parametrize("name", ["missing", "__init__", "__attrs_attrs__"])
def test_a_name_that_is_not_a_slot_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match=f"Child.{name} is not a slot"):
        slot_setters(Child, name)
