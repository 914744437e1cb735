"""Batch summaries that are total over the terminal statuses: nothing else counts as success."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from lionexec.conversation import ActionOutcome, ActionResponse
from lionexec.engine import TERMINAL_STATUSES, EventStatus

__all__ = ["BatchSummary"]


def _frozen_counts(counts: Mapping[EventStatus, int]) -> Mapping[EventStatus, int]:
    frozen = {status: counts.get(status, 0) for status in sorted(TERMINAL_STATUSES)}
    if counts.get(EventStatus.PENDING):  # calls parked for approval (awaiting_approval)
        frozen[EventStatus.PENDING] = counts[EventStatus.PENDING]
    return MappingProxyType(frozen)


@attrs.frozen
class BatchSummary:
    """Counts of a batch's responses by status and by outcome.

    ``by_status`` has an entry for each of the five terminal statuses, zeros included, and one
    for ``pending`` when calls of the batch were parked for a durable approval (outcome
    ``awaiting_approval``): the counts always add up to ``total``. Only ``completed`` counts
    as success: ``skipped``, ``cancelled`` and ``aborted`` are never folded
    into it (a batch that did not run is not a batch that succeeded).
    """

    total: int
    by_status: Mapping[EventStatus, int] = attrs.field(converter=_frozen_counts)
    by_outcome: Mapping[ActionOutcome, int]

    @classmethod
    def of(cls, responses: Iterable[ActionResponse]) -> BatchSummary:
        """Summarize *responses* (for example what :meth:`Branch.act` returned)."""
        items = list(responses)
        statuses = Counter(r.content.status for r in items)
        outcomes = Counter(r.content.outcome for r in items)
        return cls(
            total=len(items),
            by_status=statuses,
            by_outcome=MappingProxyType({o: outcomes.get(o, 0) for o in ActionOutcome}),
        )

    @property
    def succeeded(self) -> int:
        """Responses with status ``completed``; nothing else is success."""
        return self.by_status[EventStatus.COMPLETED]

    @property
    def unsuccessful(self) -> int:
        """Everything else (failed, skipped, cancelled, aborted, and pending approval)."""
        return self.total - self.succeeded

    @property
    def all_succeeded(self) -> bool:
        return self.succeeded == self.total
