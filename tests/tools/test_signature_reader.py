"""The fast parameter reader of plain functions agrees with :func:`inspect.signature`."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec.tools._schema import _plain_function_parameters

ANNOTATIONS = ["", ": int", ': "str"', ": list[int]", ": None"]
DEFAULTS = ["", "=1", "=None", '="x"']


@st.composite
def sources(draw: st.DrawFn) -> str:
    """The source of ``def f(...)`` with every kind of parameter, in a legal order."""
    names = iter(f"p{i}" for i in range(30))
    parts: list[str] = []
    defaulted = False  # after a positional default, every positional needs one

    def positional() -> str:
        nonlocal defaulted
        default = draw(st.sampled_from(DEFAULTS))
        if defaulted and not default:
            default = "=2"
        defaulted = defaulted or bool(default)
        return f"{next(names)}{draw(st.sampled_from(ANNOTATIONS))}{default}"

    only = [positional() for _ in range(draw(st.integers(0, 3)))]
    if only:
        parts += [*only, "/"]
    parts += [positional() for _ in range(draw(st.integers(0, 3)))]
    star = draw(st.sampled_from(["", "*", "*args", "*args: int"]))
    keyword = [
        f"{next(names)}{draw(st.sampled_from(ANNOTATIONS))}{draw(st.sampled_from(DEFAULTS))}"
        for _ in range(draw(st.integers(0, 3)))
    ]
    if keyword and not star:
        star = "*"
    if star and (keyword or star != "*"):
        parts += [star, *keyword]
    if draw(st.booleans()):
        parts.append(f"**kw{draw(st.sampled_from(ANNOTATIONS))}")
    returns = draw(st.sampled_from(["", " -> int"]))
    return f"def f({', '.join(parts)}){returns}:\n    pass\n"


def compile_function(source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<generated>", "exec", dont_inherit=True), namespace)
    return namespace["f"]


def by_inspect(func: Any) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(func).parameters.values()
    ]


@settings(max_examples=300, deadline=None)
@given(sources())
def test_it_reads_what_inspect_signature_reads(source: str) -> None:
    func = compile_function(source)
    assert _plain_function_parameters(func) == by_inspect(func), source


def test_it_defers_to_inspect_where_a_function_says_more() -> None:
    def inner(a: int, b: int = 2) -> int:
        return a + b

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        return inner(*args, **kwargs)

    def signed(x: int) -> None: ...

    signed.__signature__ = inspect.signature(inner)  # type: ignore[attr-defined]

    class Callable:
        def __call__(self, a: int) -> int:
            return a

    for func in (wrapper, signed, functools.partial(inner, 1), Callable(), Callable().__call__):
        assert _plain_function_parameters(func) is None
    assert _plain_function_parameters(inner) == by_inspect(inner)
    assert _plain_function_parameters(lambda a, *b, c=3, **d: 0) == by_inspect(
        lambda a, *b, c=3, **d: 0
    )
