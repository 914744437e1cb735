"""Helpers for testing code built on lionexec.

``assert_consistent(branch)`` checks the invariants :meth:`Branch.act` guarantees, whatever
happened (failures, denials, timeouts, cancellation, raising hooks and callbacks); use it at
the end of your own tests. ``assert_linked(history)`` checks a history's own invariants.
``tool_call(name, **arguments)`` builds a proposal.
"""

from __future__ import annotations

import uuid
from typing import Any

from .act import Branch
from .conversation import ActionRequest, ActionResponse, Message, MessageManager

__all__ = ["assert_consistent", "assert_linked", "tool_call"]


def tool_call(function: str, /, **arguments: Any) -> dict[str, Any]:
    """A proposal ``{"function": function, "arguments": arguments}`` for :meth:`Branch.act`."""
    return {"function": function, "arguments": arguments}


def assert_linked(history: MessageManager) -> None:
    """Assert a history's invariants, checked from the outside by walking it in order.

    Ids are unique; every response comes after the request it answers, and the two name each
    other; a request that names a response names one that is in the history.

    Raises:
        AssertionError: naming the first invariant that does not hold (under ``python -O``
            too).
    """
    seen: dict[uuid.UUID, Message] = {}
    for message in history:
        if message.id in seen:
            raise AssertionError(f"message id {message.id} appears twice")
        if isinstance(message, ActionResponse):
            request = seen.get(message.content.action_request_id)  # type: ignore[arg-type]
            if not isinstance(request, ActionRequest):
                raise AssertionError(f"{message.id} answers no earlier request")
            if request.content.action_response_id != message.id:
                raise AssertionError(f"{request.id} links elsewhere")
        seen[message.id] = message
    for message in seen.values():
        if isinstance(message, ActionRequest) and message.content.action_response_id is not None:
            response = seen.get(message.content.action_response_id)
            if not isinstance(response, ActionResponse):
                raise AssertionError(f"{message.id} names a missing response")
    if len(history) != len(seen):
        raise AssertionError(f"{len(history)} messages, {len(seen)} seen walking the history")


def assert_consistent(branch: Branch) -> None:
    """Assert the evidence invariants of *branch*.

    * every action request in the history has exactly one response, linked both ways;
    * there is an event-log record for exactly the calls that were invoked (attempts > 0) by
      this branch object (a reopened journaled branch's committed calls ran before: they
      need none);
    * each record's status equals its response's status and its event's status.

    The checks run under ``python -O`` too (they are not ``assert`` statements).

    Raises:
        AssertionError: naming the first invariant that does not hold.
    """
    messages = branch.messages
    assert_linked(messages)
    requests, responses = messages.requests(), messages.responses()
    unanswered = messages.unanswered()
    if unanswered:
        raise AssertionError(f"requests without a response: {[r.id for r in unanswered]}")
    if len(requests) != len(responses):
        raise AssertionError(f"{len(requests)} requests, {len(responses)} responses")
    for request in requests:
        response = messages.response_for(request)
        if response is None:
            raise AssertionError(f"request {request.id} has no response")
        if request.content.action_response_id != response.id:
            raise AssertionError(f"{request.id} links elsewhere")
        if response.content.action_request_id != request.id:
            raise AssertionError(f"{response.id} links elsewhere")
    records = {record.response_id: record for record in branch.log}
    if len(records) != len(branch.log):
        raise AssertionError("two log records name one response")
    # A reopened journaled branch's committed calls ran in another process (or were resolved
    # by recovery): this process's log holds only the calls this branch recorded.
    recorded_here = {m.id for m in messages.appended_since(branch._inherited)}
    invoked = {r.id: r for r in responses if r.content.attempts > 0 and r.id in recorded_here}
    if set(records) != set(invoked):
        raise AssertionError(
            f"log records {sorted(map(str, records))} != invoked calls {sorted(map(str, invoked))}"
        )
    for response_id, record in records.items():
        status = invoked[response_id].content.status
        if record.status is not status:
            raise AssertionError(f"log says {record.status}, history says {status}")
        event_status = record.event.status
        if event_status is not status:
            raise AssertionError(f"event says {event_status}, history says {status}")
        request_id = invoked[response_id].content.action_request_id
        if record.request_id != request_id:
            raise AssertionError(
                f"log record of {response_id} names request {record.request_id}, "
                f"history says {request_id}"
            )
