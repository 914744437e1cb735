"""Reading tool calls out of the shapes models and callers propose them in."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from lionexec.conversation import ActionRequest, AssistantResponse, new_call_id

__all__ = ["Proposal", "ProposedBatch", "read_batch", "read_proposal"]

_SHAPES = (
    "an ActionRequest, a mapping with 'function' and 'arguments', an OpenAI tool_calls item, "
    "an Anthropic tool_use block, or an object with 'function' and 'arguments' attributes"
)


@attrs.frozen
class Proposal:
    """One proposed tool call, read but not yet validated.

    ``arguments`` is ``None`` when the proposal's arguments could not be read as a JSON
    object; ``problem`` then says why, and the call ends ``invalid``.
    """

    function: str
    arguments: dict[str, Any] | None
    call_id: str
    problem: str | None = None
    request: ActionRequest | None = None


@attrs.frozen
class ProposedBatch:
    """One ``act()`` batch, read but not yet validated or recorded.

    Attributes:
        turn: the assistant turn that proposed the calls, to be added to the history before
            the requests, or ``None`` when the caller passed bare tool calls.
        proposals: the proposed calls, in the order proposed.
    """

    turn: AssistantResponse | None
    proposals: list[Proposal]


def read_batch(action_request: object) -> ProposedBatch:
    """Read what was passed to ``act()`` into a :class:`ProposedBatch`.

    A list is a batch of tool calls, each read with :func:`read_proposal`; anything else is
    one tool call. Nothing is recorded.

    Raises:
        ValueError: a tool call cannot be read, or two calls of the batch share a call id
            (the message names the id). Nothing has been recorded at that point.
    """
    envelopes = action_request if isinstance(action_request, list) else [action_request]
    proposals = [read_proposal(envelope) for envelope in envelopes]
    _check_unique_ids(proposals)
    return ProposedBatch(turn=None, proposals=proposals)


def _check_unique_ids(proposals: list[Proposal]) -> None:
    if len(proposals) < 2:
        return
    seen: set[str] = set()
    for proposal in proposals:
        if proposal.call_id in seen:
            raise ValueError(
                f"tool call id {proposal.call_id!r} appears more than once in one batch; "
                "every call of a batch needs its own id"
            )
        seen.add(proposal.call_id)


def read_proposal(envelope: object) -> Proposal:
    """Read *envelope* into a :class:`Proposal`.

    Raises:
        ValueError: *envelope* is none of the accepted shapes; the message names the type
            received and the shapes accepted. Nothing has been recorded at that point.
    """
    if isinstance(envelope, ActionRequest):
        content = envelope.content
        function, raw, call_id = content.function, content.arguments, content.call_id
        return _proposal(function, raw, call_id, envelope, request=envelope)
    if type(envelope) is dict or isinstance(envelope, Mapping):
        if envelope.get("type") == "function" and isinstance(envelope.get("function"), Mapping):
            spec = envelope["function"]  # OpenAI tool_calls item
            return _proposal(spec.get("name"), spec.get("arguments"), envelope.get("id"), envelope)
        if envelope.get("type") == "tool_use":  # Anthropic content block
            return _proposal(
                envelope.get("name"), envelope.get("input"), envelope.get("id"), envelope
            )
        if "function" in envelope and "arguments" in envelope:
            return _proposal(
                envelope["function"], envelope["arguments"], envelope.get("call_id"), envelope
            )
        raise ValueError(
            f"cannot read a tool call from a mapping with keys {sorted(map(str, envelope))}; "
            f"expected {_SHAPES}"
        )
    if hasattr(envelope, "function") and hasattr(envelope, "arguments"):
        return _proposal(
            envelope.function,
            envelope.arguments,
            getattr(envelope, "call_id", None),
            envelope,
        )
    raise ValueError(f"cannot read a tool call from {type(envelope).__name__}; expected {_SHAPES}")


def _proposal(
    function: object,
    raw: object,
    call_id: object,
    envelope: object,
    *,
    request: ActionRequest | None = None,
) -> Proposal:
    if not isinstance(function, str) or not function:
        raise ValueError(
            f"a tool call needs a non-empty function name, got {function!r} in "
            f"{type(envelope).__name__}"
        )
    if call_id is not None and not isinstance(call_id, str):
        raise ValueError(f"a tool call id must be a string, got {call_id!r}")
    arguments, problem = _read_arguments(raw)
    return Proposal(
        function=function,
        arguments=arguments,
        call_id=call_id or new_call_id(),
        problem=problem,
        request=request,
    )


def _read_arguments(raw: object) -> tuple[dict[str, Any] | None, str | None]:
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"arguments are not valid JSON: {exc}"
    if type(raw) is dict or isinstance(raw, Mapping):
        for key in raw:
            if not isinstance(key, str):
                return None, f"argument names must be strings, got {key!r}"
        return dict(raw), None
    if attrs.has(type(raw)):
        return attrs.asdict(raw), None  # type: ignore[arg-type]
    return None, f"arguments must be a JSON object, got {type(raw).__name__}"
