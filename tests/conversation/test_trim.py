"""MessageManager.trim_calls: whole pairs, oldest first, never a call in flight (issue 13)."""

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
