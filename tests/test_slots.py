"""lionexec._slots: assigning a frozen attrs instance's slots through their own descriptors."""

from __future__ import annotations

import attrs
import pytest

from lionexec._slots import shallow_copy, slot_setters


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


@attrs.define
class Plain:
    a: list[int]
    _b: int = 0


@attrs.define
class Guarded:
    a: int = attrs.field(validator=attrs.validators.instance_of(int))
    frozen: str = attrs.field(default="x", on_setattr=attrs.setters.frozen)


@pytest.mark.parametrize(
    "original", [Plain([1], 2), Child(a=1, b=2), Guarded(a=1, frozen="y")], ids=type
)
def test_a_shallow_copy_is_a_new_instance_with_the_same_values(original: object) -> None:
    clone = shallow_copy(original)
    assert clone is not original
    assert type(clone) is type(original)
    for field in attrs.fields(type(original)):
        assert getattr(clone, field.name) is getattr(original, field.name)
    assert shallow_copy(original) == original  # the compiled copier is reused


def test_a_shallow_copy_skips_validators_and_shares_nested_values() -> None:
    original = Guarded(a=1)
    object.__setattr__(original, "a", "not an int")  # a copy copies; it does not check
    assert shallow_copy(original).a == "not an int"
    plain = Plain([1])
    shallow_copy(plain).a.append(2)
    assert plain.a == [1, 2]
