"""read_batch: what act() is given, read into one batch (an optional turn and its proposals)."""

from __future__ import annotations

import pytest

from lionexec.act import ProposedBatch, read_batch


def test_a_list_is_a_batch_of_calls_without_a_turn() -> None:
    batch = read_batch(
        [{"function": "a", "arguments": {"x": 1}}, {"function": "b", "arguments": "{}"}]
    )
    assert isinstance(batch, ProposedBatch)
    assert batch.turn is None
    assert [(p.function, p.arguments) for p in batch.proposals] == [("a", {"x": 1}), ("b", {})]


def test_a_single_envelope_is_one_proposal() -> None:
    batch = read_batch({"function": "a", "arguments": {}, "call_id": "call_1"})
    assert batch.turn is None
    assert [p.call_id for p in batch.proposals] == ["call_1"]


def test_duplicate_call_ids_in_one_batch_are_refused_naming_the_id() -> None:
    calls = [
        {"function": "a", "arguments": {}, "call_id": "call_dup"},
        {"function": "b", "arguments": {}, "call_id": "call_dup"},
    ]
    with pytest.raises(ValueError, match="call_dup"):
        read_batch(calls)
