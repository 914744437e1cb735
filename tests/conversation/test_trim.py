"""MessageManager.trim_calls: whole pairs, oldest first, never a call in flight."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionexec import ActionRequest, ActionResponse, Instruction, MessageManager, System
from lionexec.testing import assert_linked


def build(plan: list[str]) -> MessageManager:
    """'i' instruction, 'c' a call answered at once, 'o' one left open, 'a' answer oldest open."""
    history = MessageManager([System(content="s")])
    open_: list[ActionRequest] = []
    for step in plan:
        if step == "i":
            history.add_message(Instruction(content="u"))
        elif step in "co":
            request = ActionRequest.create("f", {"n": len(history)})
            history.add_message(request)
            if step == "c":
                history.add_message(ActionResponse.create(request, output=1))
            else:
                open_.append(request)
        elif step == "a" and open_:
            history.add_message(ActionResponse.create(open_.pop(0), output=2))
    return history


@given(st.lists(st.sampled_from("icoa"), max_size=40), st.integers(0, 12))
def test_trim_keeps_whole_pairs_and_a_suffix(plan: list[str], keep: int) -> None:
    history = build(plan)
    before = list(history)
    calls = history.calls
    removed = history.trim_calls(keep)
    after = list(history)
    assert_linked(history)
    assert isinstance(after[0], System)
    assert [m for m in before if m not in removed] == after  # order kept
    for message in removed:
        assert not isinstance(message, System)
        if isinstance(message, ActionRequest):
            assert message.content.action_response_id in {m.id for m in removed}
    removed_calls = sum(isinstance(m, ActionRequest) for m in removed)
    assert history.calls == calls - removed_calls
    assert history.calls >= min(keep, calls)
    if history.calls > keep:  # stopped early: only at a call still in flight
        first = next(m for m in after if isinstance(m, ActionRequest))
        assert first.content.action_response_id is None
    for request in history.requests():
        assert history.request_for_call_id(request.call_id) is request


def test_trim_validates_keep() -> None:
    with pytest.raises(ValueError, match="keep"):
        MessageManager().trim_calls(-1)


@given(st.lists(st.sampled_from("icoa"), max_size=30), st.integers(0, 30), st.integers(0, 8))
def test_appended_since_returns_what_came_after_a_mark(
    plan: list[str], cut: int, keep: int
) -> None:
    history = build(plan)
    everything = list(history)
    mark = min(cut, len(everything))
    assert history.appended == len(everything)
    assert list(history.appended_since(mark)) == everything[mark:]
    removed = history.trim_calls(keep, before=mark)
    assert history.appended == len(everything)  # trimming never lowers it
    assert not set(removed) & set(everything[mark:])  # nothing after the mark went
    assert list(history.appended_since(mark)) == everything[mark:]
    assert_linked(history)


def test_a_pair_answered_after_the_mark_is_kept() -> None:
    history = build("oc")  # an open call, then one answered at once
    [old, _] = history.requests()
    mark = history.appended
    history.add_message(ActionResponse.create(old, output=3))  # the old call answered late
    assert history.trim_calls(0, before=mark) == ()  # its pair must wait: the answer is late
    removed = history.trim_calls(0, before=history.appended)
    assert len(removed) == 4 and history.calls == 0


def test_trim_validates_before() -> None:
    with pytest.raises(ValueError, match="before"):
        MessageManager().trim_calls(0, before=1.5)  # type: ignore[arg-type]
