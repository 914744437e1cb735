"""The journaled-server rows of ``benchmarks.journal_cost``: their body answers every request
(each a one-call ``POST /v1/act``, in process) and reads each conversation's whole history
only where it should: once per conversation with the history kept, every request without."""

from __future__ import annotations

import pytest
import trio

from benchmarks import journal_cost

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("history_cache", "expected"), [(20_000, 2), (0, 6)])
async def test_the_server_rows_read_whole_histories_only_where_they_should(
    monkeypatch: pytest.MonkeyPatch, history_cache: int, expected: int, whole_reads: list[str]
) -> None:
    monkeypatch.setattr(journal_cost, "SERVER_CONVERSATION", 3)
    with trio.fail_after(30):
        cpu = await journal_cost.server_body(history_cache)(6)  # two conversations
    assert cpu > 0
    assert len(whole_reads) == expected and len(set(whole_reads)) == 2
