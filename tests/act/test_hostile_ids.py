"""Call ids and function names a model sends that no journal could keep refuse the batch.

A journal indexes call ids (PostgreSQL indexes at most about 2.7 kB of one), a call's default
idempotency key holds its id, and PostgreSQL stores no NUL character: such a call used to fail
the group commit of every branch it shared.
"""

from __future__ import annotations

import pytest

from lionexec import Branch
from lionexec.act import MAX_CALL_ID_CHARS


def call(function: str, call_id: str, **arguments: int) -> dict[str, object]:
    return {"function": function, "arguments": arguments, "call_id": call_id}


pytestmark = pytest.mark.timeout(30)


def add(a: int, b: int) -> int:
    return a + b


def branch() -> Branch:
    made = Branch()
    made.registry.register_tool(add)
    return made


@pytest.mark.parametrize(
    ("proposal", "match"),
    [
        (call("add", call_id="x" * (MAX_CALL_ID_CHARS + 1), a=1, b=2), "at most 256"),
        (call("add", call_id="call\x00_1", a=1, b=2), "NUL"),
        (call("ad\x00d", call_id="c1", a=1, b=2), "NUL"),
        ({"function": "add\x00", "arguments": "{}", "call_id": "c1"}, "NUL"),
    ],
)
async def test_an_id_or_name_no_journal_could_keep_refuses_the_batch(
    proposal: object, match: str
) -> None:
    made = branch()
    with pytest.raises(ValueError, match=match):
        await made.act([call("add", call_id="ok", a=1, b=1), proposal])
    assert len(made.messages) == 0  # nothing recorded, not even the good call


async def test_the_longest_call_id_is_kept() -> None:
    made = branch()
    call_id = "é" * MAX_CALL_ID_CHARS
    [response] = await made.act(call("add", call_id=call_id, a=1, b=2))
    assert response.output == 3
    assert made.messages.requests()[0].call_id == call_id
