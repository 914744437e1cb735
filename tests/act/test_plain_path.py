"""The plain path records exactly what the general path records.

A call with nothing between resolve and its tool (no gate, policy, ``tool.pre`` hook,
transform, sink or attempt deadline), or whose gate, policy and ``tool.pre`` hooks all allow it
without awaiting, runs its event in the transaction's own coroutine, and a
plain batch (no limiter, cap, throttle or ``return_exceptions``) runs its transactions without
``fan_out``. ``call_params=AlcallParams(timeout=...)`` (an attempt deadline that never
expires) sends each call through :meth:`CallTransaction.invoke` instead, and
``return_exceptions=True`` sends the batch through ``fan_out``: the histories and logs of both
must agree field by field, ids, times and durations aside.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import attrs
import pytest
import trio

from lionexec import Branch, HookPoint, PermissionPolicy, SessionObserver
from lionexec.act import AlcallParams
from lionexec.conversation import ActionRequest
from lionexec.errors import DuplicateCallError
from lionexec.testing import assert_consistent
from lionexec.tools import Tool

pytestmark = pytest.mark.timeout(30)

#: A never-expiring attempt deadline: every call goes through invoke(), the batch through
#: fan_out (return_exceptions), and nothing else changes.
GENERAL = AlcallParams(timeout=3600.0, return_exceptions=True)


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def boom(a: int) -> None:
    """Always fail."""
    raise ValueError(f"boom {a}")


async def echo(value: Any) -> Any:
    """Return what it is given."""
    return value


def fresh(**kwargs: Any) -> Branch:
    branch = Branch(**kwargs)
    branch.register_tools([add, boom, echo])
    return branch


_GENERATED = re.compile(r"call_[0-9a-f]{32}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class _Ids:
    """Ids and times replaced by their order of appearance (two branches' differ)."""

    def __init__(self) -> None:
        self.seen: dict[object, str] = {}

    def name(self, value: object) -> str:
        return self.seen.setdefault(value, f"#{len(self.seen)}")

    def plain(self, value: object, field: str = "") -> Any:
        if field in {"created_at", "duration"}:
            return type(value).__name__  # (times differ; their presence and type do not)
        if isinstance(value, str) and _UUID.fullmatch(value):
            value = uuid.UUID(value)  # (a branch's name)
        if isinstance(value, uuid.UUID) or (
            isinstance(value, str) and _GENERATED.fullmatch(value)
        ):
            return self.name(value)
        if isinstance(value, BaseException):
            return (type(value).__name__, str(value))
        if isinstance(value, Tool):
            return value.name
        if attrs.has(type(value)):
            return (
                type(value).__name__,
                {
                    f.name: self.plain(getattr(value, f.name), f.name)
                    for f in attrs.fields(type(value))
                },
            )
        if isinstance(value, dict):
            return {self.plain(k): self.plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.plain(item) for item in value]
        if isinstance(value, float) and value != value:
            return "nan"
        return value


def records(branch: Branch) -> tuple[Any, Any]:
    """The branch's history and log, field by field, ids and times normalized: each id
    named after the request it belongs to (requests are admitted in proposal order), and
    the records sorted (a concurrent batch's calls end in the scheduler's order)."""
    assert_consistent(branch)
    ids = _Ids()
    ids.seen[branch.id] = "branch"
    requests = [m for m in branch.messages if isinstance(m, ActionRequest)]
    for index, request in enumerate(requests):
        ids.seen[request.id] = f"request {index}"
        ids.seen[request.content.call_id] = f"call {index}"
        ids.seen[request.content.action_response_id] = f"response {index}"
    for record in branch.log:
        ids.seen[record.event.id] = f"event of {ids.seen[record.request_id]}"
    return (
        sorted((ids.plain(m) for m in branch.messages), key=repr),
        sorted((ids.plain(r) for r in branch.log), key=repr),
    )


def error_text(exc: BaseException) -> str:
    return re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", str(exc))


def governed() -> Branch:
    """A branch whose gate, rules policy and hooks decide without awaiting: the gate denies
    ``a == 2``, no rule allows ``boom``, the ``tool.pre`` hook denies ``b == 7``."""
    observer = SessionObserver()
    observer.gate(lambda invocation: invocation.arguments.get("a") != 2)
    policy = PermissionPolicy(mode="rules", allow={"add": ["*"], "echo": ["*"]})
    branch = fresh(observer=observer, policy=policy)
    posted: list[str] = []
    branch.hooks.on(
        HookPoint.TOOL_PRE, lambda context, **_: False if context.arguments.get("b") == 7 else None
    )
    branch.hooks.on(HookPoint.TOOL_POST, lambda call_id, **_: posted.append(call_id))
    _POSTED[branch.id] = posted
    return branch


#: What each governed branch's ``tool.post`` hook was told (call ids), by branch id.
_POSTED: dict[uuid.UUID, list[str]] = {}


async def both(calls: Any, make: Any = fresh, **kwargs: Any) -> tuple[Any, Any]:
    """The records of *calls* acted on a branch *make* made by the plain and the general
    path, and what each act returned or raised (and, on a governed branch, what its observer
    kept and its ``tool.post`` hook was told)."""
    out = []
    for params in (None, GENERAL):
        branch = make()
        try:
            result: Any = await branch.act(calls, call_params=params, **kwargs)
            got: Any = _Ids().plain(result)
        except Exception as exc:
            got = (type(exc).__name__, error_text(exc))
        assert branch.statistics().in_flight == 0
        seen: Any = None
        if branch.observer is not None:  # what the observer kept; how often tool.post ran
            kept = sorted(type(r).__name__ for r in branch.observer.records)
            seen = (kept, len(_POSTED.pop(branch.id)))
        out.append((records(branch), got) if seen is None else (records(branch), got, seen))
    return out[0], out[1]


def adds(n: int) -> list[dict[str, Any]]:
    return [{"function": "add", "arguments": {"a": i, "b": 1}} for i in range(n)]


def deep(levels: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(levels):
        nested = [nested]
    return nested


HOSTILE_ARGUMENTS = {
    "huge int": {"value": 10**5000},
    "deep": {"value": deep(70)},
    "nan": {"value": float("nan")},
    "infinity": '{"value": Infinity}',
    "lone surrogate": {"value": "\ud800"},
    "lone surrogate name": {"\udfff": 1},
    "name not a string": {1: 2},
    "repeated name": '{"value": 1, "value": 2}',
    "huge text": "x" * 1_000_001,
    "not an object": "[1, 2]",
}


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
@pytest.mark.parametrize(
    "calls",
    [
        adds(3),
        adds(1),
        adds(1)[0],
        [{"function": "boom", "arguments": {"a": i}} for i in range(3)],
        [*adds(2), {"function": "nope", "arguments": {}}, {"function": "add", "arguments": {}}],
        [{"function": "echo", "arguments": {"value": {"x": [1, 2.5, None]}}}, *adds(1)],
        [{"function": "echo", "arguments": v} for v in HOSTILE_ARGUMENTS.values()],
        [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            }
            for i in range(2)
        ],
    ],
    ids=[
        "completed",
        "one in a list",
        "one dict",
        "failed",
        "invalid",
        "copies",
        "hostile",
        "openai",
    ],
)
async def test_the_plain_path_records_what_the_general_path_records(
    calls: Any, strategy: str
) -> None:
    plain, general = await both(calls, strategy=strategy)
    assert plain == general
    (history, _), _ = plain
    assert len(history) == 2 * (len(calls) if isinstance(calls, list) else 1)


@pytest.mark.parametrize(
    "calls",
    [
        [{**adds(1)[0], "call_id": "c1"}, {**adds(1)[0], "call_id": "c1"}],
        [{**adds(1)[0], "call_id": "bad\x00id"}, *adds(1)],
        [{**adds(1)[0], "call_id": "\ud800"}, *adds(1)],
        [{**adds(1)[0], "call_id": "x" * 257}, *adds(1)],
        [{"function": "add\x00", "arguments": {}}, *adds(1)],
        [{"function": 7, "arguments": {}}, *adds(1)],
    ],
    ids=["repeated id", "nul id", "surrogate id", "long id", "nul name", "name not text"],
)
async def test_a_batch_both_paths_refuse_records_nothing(calls: Any) -> None:
    plain, general = await both(calls)
    assert plain == general
    (history, log), (kind, _) = plain
    assert history == [] and log == []
    assert kind in {"ValueError", "DuplicateCallError"}


async def test_an_id_already_in_the_history_is_refused_by_both_paths() -> None:
    for params in (None, GENERAL):
        branch = fresh()
        await branch.act({**adds(1)[0], "call_id": "c1"}, call_params=params)
        before = records(branch)
        with pytest.raises(DuplicateCallError, match="'c1' is already in this history"):
            await branch.act([*adds(1), {**adds(1)[0], "call_id": "c1"}], call_params=params)
        assert records(branch) == before


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
@pytest.mark.parametrize("n", [1, 3])
async def test_a_batch_cancelled_before_it_starts_records_the_same_on_both_paths(
    strategy: str, n: int
) -> None:
    out = []
    for params in (None, GENERAL):
        branch = fresh()
        with trio.CancelScope() as scope:
            scope.cancel()
            await branch.act(adds(n), strategy=strategy, call_params=params)
        assert scope.cancelled_caught
        assert branch.statistics().in_flight == 0
        out.append(records(branch))
    assert out[0] == out[1]
    history, _ = out[0]
    outcomes = [m[1]["content"][1]["outcome"] for m in history if m[0] == "ActionResponse"]
    assert [o.value for o in outcomes] == ["cancelled"] * n


async def test_a_failure_raised_ends_a_plain_batch_as_a_general_one() -> None:
    # (sequential: in a concurrent batch, whether the others end first is the scheduler's)
    out = []
    for params in (None, AlcallParams(timeout=3600.0)):
        branch = fresh()
        with pytest.raises(ValueError, match="boom 0"):
            await branch.act(
                [{"function": "boom", "arguments": {"a": 0}}, *adds(2)],
                strategy="sequential",
                suppress_errors=False,
                call_params=params,
            )
        out.append(records(branch))
    assert out[0] == out[1]


async def test_a_retried_tool_records_the_same_attempts_on_both_paths() -> None:
    tries: list[int] = []

    async def flaky(a: int) -> int:
        tries.append(a)
        if len(tries) % 3:
            raise RuntimeError("not yet")
        return a

    out = []
    for timeout in (None, 3600.0):
        branch = fresh()
        branch.register_tools(Tool.from_function(flaky, idempotent=True))
        params = AlcallParams(retry_attempts=2, retry_initial_delay=1.0, timeout=timeout)
        [response] = await branch.act(
            {"function": "flaky", "arguments": {"a": 5}}, call_params=params
        )
        assert response.output == 5
        assert response.content.attempts == 3
        out.append(records(branch))
    assert out[0] == out[1]


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_governance_that_allows_at_once_records_what_the_general_path_records(
    strategy: str,
) -> None:
    calls = [
        *adds(3),  # a == 2: the gate denies it
        {"function": "add", "arguments": {"a": 5, "b": 7}},  # the tool.pre hook denies it
        {"function": "boom", "arguments": {"a": 1}},  # no rule allows it
        {"function": "echo", "arguments": {"value": [1, {"x": None}]}},
    ]
    plain, general = await both(calls, governed, strategy=strategy)
    assert plain == general
    (history, _), _, (kept, posted) = plain
    outcomes = sorted(m[1]["content"][1]["outcome"] for m in history if m[0] == "ActionResponse")
    assert outcomes == ["completed"] * 3 + ["denied"] * 3
    assert kept.count("GateDenied") == 1 and posted == 3
