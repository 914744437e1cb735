"""The journaled-server rows of ``benchmarks.journal_cost``: their body answers every request
(each a one-call ``POST /v1/act``, in process) and reads each conversation's whole history
only where it should: once per conversation with the history kept, every request without."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from benchmarks import journal_cost
from lionexec.journal.backends._sql import SqlStore

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("history_cache", "whole_reads"), [(20_000, 2), (0, 6)])
async def test_the_server_rows_read_whole_histories_only_where_they_should(
    monkeypatch: pytest.MonkeyPatch, history_cache: int, whole_reads: int
) -> None:
    monkeypatch.setattr(journal_cost, "SERVER_CONVERSATION", 3)
    reads: list[str] = []
    whole = SqlStore.messages

    def messages(self: Any, branch_id: str) -> Any:
        reads.append(branch_id)
        return whole(self, branch_id)

    monkeypatch.setattr(SqlStore, "messages", messages)
    with trio.fail_after(30):
        cpu = await journal_cost.server_body(history_cache)(6)  # two conversations
    assert cpu > 0
    assert len(reads) == whole_reads and len(set(reads)) == 2
