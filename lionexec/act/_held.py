"""What an act() on a branch with durable sinks (a journal) checks before it answers: that
every durable sink holds the record of the act's calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lionexec.conversation import ActionRequest, ActionResponse, MessageManager
from lionexec.errors import NotDurableError

from ._evidence import SinkFeed

__all__ = ["check_held"]


def check_held(
    branch_name: str,
    durable: Sequence[SinkFeed],
    history: MessageManager,
    requests: list[ActionRequest],
    responses: list[Any],
    lost: list[int],
    accepted: list[int],
) -> None:
    """Raise :class:`NotDurableError` unless every *durable* feed's sink holds the record of
    *requests* (written, after :meth:`SinkFeed.wait_settled`).

    A sink that says how much of the history it holds (``committed``) is asked whether the
    batch's messages are among those: a write of it that failed may have been made good by a
    later one (a journal's next commit carries what the failed one missed). Of another, any
    record lost since the batch began (*lost*: each feed's count then) counts, the batch's
    own or not, and so does one not written when the wait ended (the feed's service stopped:
    *accepted*, each feed's count the wait was for). Synchronous.
    """
    for feed, before, mark in zip(durable, lost, accepted, strict=True):
        committed = getattr(feed.sink, "committed", None)
        if type(committed) is int:
            ours = {request.id for request in requests}
            unheld = any(
                message.id in ours
                or (
                    isinstance(message, ActionResponse)
                    and message.content.action_request_id in ours
                )
                for message in history.appended_since(committed)
            )
        else:
            unheld = feed.lost > before or feed.settled < mark
        if unheld:
            error = feed.last_error
            if feed.settled < mark:
                why, error = "its service stopped before writing them", None
            elif error is None:
                why = "records dropped: its service stopped, or the branch closed"
            else:
                why = f"a write failed: {error!r}"
            raise NotDurableError(
                f"the {len(requests)} call(s) of this act() were answered and are recorded "
                f"in branch {branch_name}, but the durable sink {feed.sink!r} does not hold "
                f"them ({why}); a journal writes them with its next commit "
                "(await journal.flush())",
                responses=responses,
                sink=repr(feed.sink),
            ) from error
