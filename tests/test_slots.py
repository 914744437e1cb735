"""lionexec._slots: building and copying slotted attrs instances without their initializers."""

from __future__ import annotations

import weakref

import attrs
import pytest

from lionexec._slots import builder, shallow_copy


@attrs.frozen
class Base:
    a: int


@attrs.frozen
class Child(Base):
    b: int


def test_a_builder_sets_own_and_inherited_fields_and_the_instance_stays_frozen() -> None:
    build = builder(Child, "b", "a")  # values come in the order the names are given
    child = build(2, 1)
    assert type(child) is Child
    assert child == Child(a=1, b=2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        child.a = 3  # type: ignore[misc]
    assert weakref.ref(child)() is child  # the class's own slots, __weakref__ included


def test_a_builder_runs_no_validator_or_converter() -> None:
    guarded = builder(Guarded, "a", "frozen")("not an int", "y")
    assert guarded.a == "not an int"  # type: ignore[comparison-overlap]
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        guarded.frozen = "z"  # the class's on_setattr hooks apply once built


@pytest.mark.parametrize("names", [("a",), ("a", "b", "c"), ("a", "a")])
def test_a_builder_must_set_exactly_the_fields(names: tuple[str, ...]) -> None:
    with pytest.raises(TypeError, match="a builder of Child sets exactly its fields"):
        builder(Child, *names)


def test_a_builder_needs_a_slotted_class() -> None:
    @attrs.define(slots=False)
    class Unslotted:
        a: int

    with pytest.raises(TypeError, match="Unslotted is not a slotted class"):
        builder(Unslotted, "a")


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
