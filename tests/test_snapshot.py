"""lionexec._snapshot.snapshot: equal values sharing nothing mutable, never raising."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lionexec._snapshot import snapshot

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=4), children, max_size=4)
        | st.tuples(children, children)
    ),
    max_leaves=30,
)


def containers(value: Any) -> list[int]:
    found: list[int] = []
    if isinstance(value, dict | list):
        found.append(id(value))
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, dict | list | tuple):
        for item in items:
            found.extend(containers(item))
    return found


@given(json_values)
def test_snapshot_is_equal_and_shares_no_mutable_container(value: Any) -> None:
    copied = snapshot(value)
    assert copied == value
    assert not set(containers(copied)) & set(containers(value))


def test_uncopyable_and_too_deep_values_are_kept_by_reference() -> None:
    lock = threading.Lock()
    assert snapshot({"lock": lock})["lock"] is not None
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert snapshot(deep) is deep


def test_an_uncopyable_leaf_is_shared_and_its_containers_still_copied() -> None:
    lock = threading.Lock()
    value = {"lock": lock, "paths": ["/a"], "nested": {"locks": [lock], "n": [1]}}
    copied = snapshot(value)
    assert copied["lock"] is lock
    assert copied["nested"]["locks"][0] is lock
    assert copied == value
    assert not set(containers(copied)) & set(containers(value))  # every dict and list copied
    value["paths"].append("/b")
    value["nested"]["n"].append(2)
    assert copied["paths"] == ["/a"]
    assert copied["nested"]["n"] == [1]


def test_a_shared_container_is_copied_once_and_stays_shared() -> None:
    shared: list[Any] = []
    for _ in range(60):  # 2**60 paths to the innermost list: only 61 lists to copy
        shared = [shared, shared]
    copied = snapshot({"v": shared, "w": [shared]})
    assert copied["v"] is not shared
    assert copied["v"] is copied["w"][0]  # shared in the copy as in the original
    assert copied["v"][0] is copied["v"][1]


def test_a_container_inside_itself_is_copied_with_its_cycle() -> None:
    loop: dict[str, Any] = {"n": 1}
    loop["self"] = [loop]
    copied = snapshot(loop)
    assert copied is not loop
    assert copied["self"][0] is copied
