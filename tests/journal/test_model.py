"""Journal operations against a model of the expected state (a stateful property test).

Hypothesis draws a list of operations, replayed in one trio run (the pattern of
``tests/engine/test_processor_stateful.py``): a call (a key, arguments, an effect class), a
call whose process "dies" after its tool ran (the tool closes the journal: nothing after its
write-ahead reaches it) followed by a restart, a recovery. The model predicts, per
idempotency key, whether the tool runs, what each call is answered, and what the journal holds.

Durable approvals too: a call the policy escalates is parked; approvals are approved or
rejected (by a journal object of their own: another process), time passes (they expire), and
``resume`` (or a recovery) applies them. The model predicts each approval's state, that an
approved call runs exactly once, and that each parked call gets exactly one response, and only
once decided.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec.conversation import ActionOutcome
from lionexec.errors import NotDurableError
from lionexec.governance import PermissionPolicy
from lionexec.journal import ApprovalClosed, Journal, SqliteJournal
from lionexec.journal.backends import MemoryBackend
from lionexec.tools import Tool

EFFECTS = ("pure", "idempotent", "keyed", "unsafe")

ops = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 3), st.integers(0, 1), st.sampled_from(EFFECTS)),
        st.tuples(
            st.just("crash"), st.integers(0, 3), st.integers(0, 1), st.sampled_from(EFFECTS)
        ),
        st.tuples(st.just("recover")),
        st.tuples(st.just("park")),
        st.tuples(st.sampled_from(["approve", "reject"]), st.integers(0, 3)),
        st.tuples(st.just("tick")),
        st.tuples(st.just("resume")),
    ),
    max_size=14,
)

#: Seconds an approval stays pending; each ``tick`` is 60 s.
EXPIRY = 100.0
POLICY = PermissionPolicy(
    mode="rules", allow={f"work_{effect}": ["*"] for effect in EFFECTS}, escalate={"gated": ["*"]}
)


@attrs.define
class Key:
    """What the model knows of one idempotency key."""

    value: int
    effect: str
    done: bool = False
    outcome: ActionOutcome | None = None


@attrs.define
class Parked:
    """What the model knows of one parked call and its approval."""

    approval_id: str
    branch_id: str
    n: int
    created_at: float
    state: str = "pending"
    answer: ActionOutcome | None = None

    def state_at(self, now: float) -> str:
        if self.state == "pending" and now >= self.created_at + EXPIRY:
            return "expired"
        return self.state


@attrs.define
class Model:
    keys: dict[int, Key] = attrs.Factory(dict)
    runs: dict[int, int] = attrs.Factory(dict)
    parked: list[Parked] = attrs.Factory(list)
    now: float = 0.0

    def settle(self) -> list[tuple[str, ActionOutcome]]:
        """What applying the decided approvals does: ``(approval id, answer)`` each."""
        done = []
        for p in self.parked:
            if p.answer is not None:
                continue
            p.state = p.state_at(self.now)
            if p.state == "approved":
                p.state, p.answer = "used", ActionOutcome.COMPLETED
            elif p.state in ("rejected", "expired"):
                p.answer = ActionOutcome.DENIED
            else:
                continue
            done.append((p.approval_id, p.answer))
        return done

    def ran(self, key: int) -> None:
        self.runs[key] = self.runs.get(key, 0) + 1


def make_tool(effect: str, runs: list[int], dying: Journal | None = None) -> Tool:
    async def work(key: int, value: int) -> list[int]:
        runs.append(key)
        if dying is not None:
            await dying.aclose()
        return [key, value]

    return Tool.from_function(
        work,
        name=f"work_{effect}",
        effect=effect,  # type: ignore[arg-type]
        idempotency_key=lambda args: str(args["key"]),
    )


def gated_tool(gated: list[int]) -> Tool:
    def gated_call(n: int) -> int:
        gated.append(n)
        return n

    return Tool.from_function(gated_call, name="gated")


def tools(runs: list[int], gated: list[int] | None = None) -> list[Tool]:
    extra = gated_tool(gated if gated is not None else [])
    return [*(make_tool(effect, runs) for effect in EFFECTS), extra]


async def replay(operations: list[tuple[Any, ...]], open_journal: Any) -> None:
    model = Model()
    runs: list[int] = []
    gated: list[int] = []

    async def opened() -> Journal:
        journal: Journal = open_journal()
        journal.clock = lambda: model.now
        journal.approval_expiry = EXPIRY
        await journal.open()
        return journal

    journal = await opened()
    for op in operations:
        if op[0] == "park":
            n = len(model.parked)
            branch = await journal.branch(policy=POLICY)
            branch.register_tools(gated_tool(gated))
            async with branch:
                [response] = await branch.act(
                    {"function": "gated", "arguments": {"n": n}, "call_id": f"call_g{n}"}
                )
            assert response.outcome is ActionOutcome.AWAITING_APPROVAL
            model.parked.append(Parked(response.output["approval_id"], branch.name, n, model.now))
            continue
        if op[0] in ("approve", "reject"):
            if not model.parked:
                continue
            parked = model.parked[op[1] % len(model.parked)]
            state = parked.state_at(model.now)
            async with open_journal() as other:  # decided by another process
                other.clock = lambda: model.now
                try:
                    if op[0] == "approve":
                        approval = await other.approve(parked.approval_id, by="model")
                    else:
                        approval = await other.reject(parked.approval_id, reason="model says no")
                except ApprovalClosed as exc:
                    assert state != "pending"
                    assert exc.state == state
                    parked.state = state
                else:
                    assert state == "pending"
                    parked.state = approval.state
                    assert parked.state == {"approve": "approved", "reject": "rejected"}[op[0]]
            continue
        if op[0] == "tick":
            model.now += 60.0
            continue
        if op[0] == "resume":
            resolutions = await journal.resume(tools(runs, gated), policy=POLICY)
            done = model.settle()
            calls = {p.approval_id: p.n for p in model.parked}
            assert sorted((r.call_id, r.outcome) for r in resolutions) == sorted(
                (f"call_g{calls[a]}", outcome) for a, outcome in done
            )
            check_parked(model, gated)
            continue
        if op[0] == "recover":
            await journal.aclose()
            journal = await opened()
            report = await journal.recover(tools(runs, gated), policy=POLICY)
            pending = [k for k in model.keys.values() if not k.done]
            settled = model.settle()
            waiting = [p for p in model.parked if p.answer is None]
            counts = report.counts()
            assert counts.get("awaiting_approval", 0) == len(waiting)
            assert len(report.resolutions) == len(pending) + len(settled) + len(waiting)
            check_parked(model, gated)
            for key in pending:
                key.done = True
                if key.effect == "unsafe":
                    key.outcome = ActionOutcome.INTERRUPTED
                else:
                    key.outcome = ActionOutcome.COMPLETED
                    model.ran(key_of(model, key))
            assert await journal.calls(unfinished=True) == []
            continue
        kind, k, value, effect = op
        known = model.keys.get(k)
        if known is not None and not known.done:
            continue  # a key held by a dead call waits for recovery: not exercised here
        # a call on a key tagged with a tool of another effect class: the key's first tool wins
        effect = known.effect if known is not None else effect
        dies = kind == "crash" and known is None
        tool = make_tool(effect, runs, journal if dies else None)
        branch = await journal.branch(policy=POLICY)
        branch.register_tools(tool)
        async with branch:
            try:
                [response] = await branch.act(
                    {"function": tool.name, "arguments": {"key": k, "value": value}}
                )
            except NotDurableError as exc:  # the journal "died" before the outcome commit
                assert dies
                [response] = exc.responses
        if known is None:
            model.ran(k)
            model.keys[k] = Key(value, effect)
            if dies:
                journal = await opened()  # the restart
            else:
                model.keys[k].done = True
                model.keys[k].outcome = ActionOutcome.COMPLETED
                assert response.output == [k, value]
        elif value != known.value:
            assert response.outcome is ActionOutcome.FAILED
            assert response.error is not None
            assert response.error.type == "IdempotencyKeyConflict"
        else:
            assert response.outcome is known.outcome
            assert response.content.attempts == 0  # answered from the journal
            if known.outcome is ActionOutcome.COMPLETED:
                assert response.output == [k, known.value]
        # invariants after every operation
        assert sorted(runs) == sorted(k for k, n in model.runs.items() for _ in range(n))
        for key_value, key in model.keys.items():
            if key.effect == "unsafe":
                assert model.runs.get(key_value, 0) <= 1
    calls = {c.idempotency_key: c for c in await journal.calls()}
    for k, key in model.keys.items():
        call = calls[f"{make_tool(key.effect, []).name}:{k}"]
        assert call.done is key.done
        assert call.outcome == (key.outcome.value if key.outcome is not None else None)
    approvals = {a.approval_id: a for a in await journal.approvals(state=None)}
    assert len(approvals) == len(model.parked)
    for parked in model.parked:
        assert approvals[parked.approval_id].state == parked.state_at(model.now)
        history = await journal.history(parked.branch_id)
        answers = [r.outcome for r in history.responses()]
        assert answers == ([] if parked.answer is None else [parked.answer])
    check_parked(model, gated)
    await journal.aclose()


def check_parked(model: Model, gated: list[int]) -> None:
    """Each approved call ran exactly once, and nothing else ran."""
    used = [p.n for p in model.parked if p.state == "used"]
    assert sorted(gated) == sorted(used)


def key_of(model: Model, key: Key) -> int:
    return next(k for k, v in model.keys.items() if v is key)


@settings(max_examples=40)
@given(operations=ops)
async def test_memory_journal_matches_the_model(operations: list[tuple[Any, ...]]) -> None:
    backend = MemoryBackend()
    await replay(operations, lambda: Journal(backend))


@settings(max_examples=10)
@given(operations=ops)
async def test_sqlite_journal_matches_the_model(
    operations: list[tuple[Any, ...]], tmp_path_factory: Any
) -> None:
    path: Path = tmp_path_factory.mktemp("model") / "journal.db"
    await replay(operations, lambda: SqliteJournal(path))
