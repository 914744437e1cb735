"""How the journal writes a message: the direct text of a request or a response is the text
the converter's generic path makes, field for field, whatever the values hold; and it loads
back as the same message."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec import _unstructure
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    ErrorInfo,
    Instruction,
    Message,
)
from lionexec.journal._history import (
    _read_call_message,
    dumps_record,
    message_body,
    read_message,
    record_of,
)

pytestmark = pytest.mark.timeout(120)


def generic(message: Message) -> str:
    """The converter's path: the message's record (a request unlinked), as strict JSON."""
    record = _unstructure.converter.unstructure(message)
    if isinstance(message, ActionRequest):
        record["content"]["action_response_id"] = None
    return dumps_record(record)


def strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


texts = st.text() | st.sampled_from(["\ud800", "a\udfffb", "é😀", '"\\\n', "\x00"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**7000, max_value=2**7001)
    | st.floats()  # nan, inf included
    | texts
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(texts, inner, max_size=3)
        | st.dictionaries(st.integers(), inner, max_size=2)
    ),
    max_leaves=8,
)
optional_texts = st.none() | texts


@st.composite
def requests(draw: st.DrawFn) -> ActionRequest:
    return ActionRequest.create(
        draw(texts.filter(bool)),
        draw(st.dictionaries(texts, values, max_size=4)),
        call_id=draw(st.none() | texts.filter(bool)),
        raw_arguments=draw(optional_texts),
        sender=draw(optional_texts),
        recipient=draw(optional_texts),
    )


@st.composite
def responses(draw: st.DrawFn) -> ActionResponse:
    request = draw(requests())
    outcome = draw(st.sampled_from(list(ActionOutcome)))
    error = None
    if outcome is not ActionOutcome.COMPLETED:
        error = ErrorInfo(draw(texts), draw(texts))
    response = ActionResponse.create(
        request,
        output=draw(values | st.binary(max_size=8) | st.lists(texts, max_size=2)),
        error=error,
        outcome=outcome,
        attempts=draw(st.integers(min_value=0, max_value=5)),
        sender=draw(optional_texts),
    )
    if draw(st.booleans()):  # linked, as the history links a pair (or not)
        object.__setattr__(response.content, "action_request_id", None)
    return response


@given(st.one_of(requests(), responses()))
@settings(max_examples=400, deadline=None)
def test_a_request_or_a_response_is_written_as_the_converter_writes_it(
    message: ActionRequest | ActionResponse,
) -> None:
    if isinstance(message, ActionRequest) and message.content.action_response_id is None:
        message.content.action_response_id = uuid.uuid4()  # (unlinked in what is stored)
    text = message_body(message)
    assert text == generic(message)
    text.encode()  # UTF-8 holds it
    loaded = _unstructure.converter.structure(strict(text), Message)
    assert type(loaded) is type(message)
    assert loaded.id == message.id


def test_hostile_values_take_the_strict_spellings() -> None:
    request = ActionRequest.create(
        "f\ud800", {"x": math.nan, "big": 10**5000, "k\udfff": [math.inf]}, sender="s\ud800"
    )
    text = message_body(request)
    assert text == generic(request)
    assert "\\ud800" in text  # (the lone surrogate kept, escaped: read back unchanged)
    record = strict(text)
    assert record["content"]["arguments"]["x"] == "NaN"
    assert record["content"]["arguments"]["big"].startswith("<int with")
    assert record["sender"] == "s\ud800"
    response = ActionResponse.create(
        request,
        error=ErrorInfo("E\ud800", "m"),
        outcome=ActionOutcome.FAILED,
        output=b"\x89PNG\r\n\x1a\n" + b"\x00" * 16,
    )
    assert message_body(response) == generic(response)
    for output in ("o\ud800", 2**2500, -(2**1999), {"k": "v\udfff"}, {"n": math.nan}, True):
        response = ActionResponse.create(request, output=output)
        assert message_body(response) == generic(response)
        assert "\ud800" not in message_body(response)  # (jsonable's U+FFFD, as before)


def test_other_messages_and_subclasses_take_the_converter_path() -> None:
    instruction = Instruction(content="hi \ud800")
    assert message_body(instruction) == generic(instruction)

    @attrs.frozen(kw_only=True)
    class Noted(ErrorInfo):
        note: str = "n"

    request = ActionRequest.create("f", {"a": 1})
    response = ActionResponse.create(
        request, error=Noted(type="E", message="m"), outcome=ActionOutcome.FAILED
    )
    assert message_body(response) == generic(response)
    assert record_of(response)["content"]["error"]["type"] == "E"


def test_the_row_builders_build_what_the_classes_build() -> None:
    from lionexec.journal.backends import base

    assert base.message_row("b", 3, "m", "action_request", "{}", "c") == base.MessageRow(
        "b", 3, "m", "action_request", "{}", "c"
    )
    assert base.outcome_op("b", "c", "completed", "{}", 1.5) == base.OutcomeOp(
        branch_id="b", call_id="c", outcome="completed", response="{}", at=1.5
    )
    op = base.request_op("k", "b", "c", "r", "f", "{}", "pure", 2.5, True, 7)
    assert op == base.RequestOp(
        key="k",
        branch_id="b",
        call_id="c",
        request_id="r",
        function="f",
        arguments="{}",
        effect="pure",
        at=2.5,
        fresh=True,
        seq=7,
    )
    claim = base.fresh_claim(op)
    row = base.CallRow(
        key="k",
        branch_id="b",
        call_id="c",
        request_id="r",
        function="f",
        arguments="{}",
        effect="pure",
        attempts=1,
        state=base.REQUESTED,
        outcome=None,
        response=None,
        requested_at=2.5,
        finished_at=None,
    )
    assert claim == base.Claim(row, True, 0)
    assert type(claim) is base.Claim and type(claim.row) is base.CallRow
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        claim.row.attempts = 2  # type: ignore[misc]  # (frozen, as the class makes it)
    assert hash(op) == hash(base.RequestOp(**attrs.asdict(op)))


# -- reading it back -------------------------------------------------------------------------


def structured(record: Any) -> Message:
    """The converter's path: what loading a stored message always did."""
    return _unstructure.converter.structure(record, Message)  # type: ignore[no-any-return]


def result(read: Any, record: Any) -> tuple[Any, ...]:
    """What *read* makes of *record*: the message, or the error's type and text. What a
    record leaves out and the classes make afresh (an id, a creation time, a call id) is set
    to one value, so that two reads compare."""
    try:
        message = read(record)
    except Exception as exc:
        return ("error", type(exc), str(exc))
    if "id" not in record:
        message = attrs.evolve(message, id=uuid.UUID(int=0))
    if "created_at" not in record:
        message = attrs.evolve(message, created_at=0.0)
    content = record.get("content")
    if (
        isinstance(message, ActionRequest)
        and isinstance(content, dict)
        and "call_id" not in content
    ):
        message = attrs.evolve(message, content=attrs.evolve(message.content, call_id="c"))
    return ("message", type(message), repr(message))  # (repr: a NaN output equals itself)


@given(st.one_of(requests(), responses()))
@settings(max_examples=400, deadline=None)
def test_a_stored_request_or_response_reads_back_as_the_converter_reads_it(
    message: ActionRequest | ActionResponse,
) -> None:
    record = strict(message_body(message))
    direct = _read_call_message(strict(message_body(message)))
    assert direct is not None  # (the direct path, not the converter's behind it)
    assert type(direct) is type(message)
    assert direct == structured(record)
    assert read_message(record) == direct


def _mutations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """*record* with one thing wrong (or merely unusual) each: a key more or less, a value of
    another JSON type, a value the classes refuse."""
    out: list[dict[str, Any]] = []

    def changed(path: tuple[str, ...], value: Any, *, drop: bool = False) -> None:
        copy = json.loads(json.dumps(record))
        target = copy
        for key in path[:-1]:
            target = target[key]
        if drop:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        out.append(copy)

    wrong = [None, True, 0, 1.5, -1, "", "x", "NaN", [], {}, {"a": 1}, 10**40, math.nan]
    for key in ("id", "created_at", "sender", "recipient", "content", "kind", "role"):
        changed((key,), None, drop=True)
        for value in wrong:
            changed((key,), value)
    changed(("extra",), 1)
    changed(("id",), "{" + record["id"] + "}")  # (text UUID() reads, differently spelled)
    changed(("id",), record["id"].upper())
    changed(("created_at",), 5)
    for key in list(record["content"]):
        changed(("content", key), None, drop=True)
        for value in wrong:
            changed(("content", key), value)
    changed(("content", "extra"), 1)
    changed(("content", "arguments"), {"k": [1, {"n": None}]})
    if record["kind"] == "action_response":
        for outcome in ("completed", "failed", "denied", "cancelled", "nope"):
            changed(("content", "outcome"), outcome)
        for status in ("completed", "failed", "skipped", "nope"):
            changed(("content", "status"), status)
        changed(("content", "error"), {"type": "E", "message": "m"})
        changed(("content", "error"), {"type": "E", "message": "m", "more": 1})
        changed(("content", "error"), {"type": 1, "message": "m"})
        changed(("content", "error"), {"type": "E"})
        changed(("content", "attempts"), False)
    return out


def test_a_stored_record_with_anything_unusual_reads_as_the_converter_reads_it() -> None:
    request = ActionRequest.create("f", {"a": 1}, call_id="c1", raw_arguments='{"a": 1}')
    responses_ = [
        ActionResponse.create(request, output={"x": [1, 2]}),
        ActionResponse.create(
            request, error=ErrorInfo("E", "m"), outcome=ActionOutcome.FAILED, attempts=2
        ),
    ]
    checked = 0
    for message in (request, *responses_):
        base = strict(message_body(message))
        assert result(read_message, base) == result(structured, base)
        for record in _mutations(base):
            assert result(read_message, record) == result(structured, record), record
            checked += 1
    assert checked > 600
    # other kinds, and what is no message at all, take the converter's path
    for record in (strict(message_body(Instruction(content="hi"))), [], "x", None, {}):
        assert result(read_message, record) == result(structured, record)
