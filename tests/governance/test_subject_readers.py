"""Subject readers: the registry of subject kinds, and a kind of one's own read by the rules."""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Iterator

import pytest

import lionexec.governance as governance
import lionexec.governance.subjects as subjects
from lionexec.errors import ConfigurationError
from lionexec.governance import (
    Objection,
    PermissionPolicy,
    ReadSubject,
    SubjectReader,
    register_subject_kind,
    subject_kinds,
)
from lionexec.governance.subjects import base


@pytest.fixture(autouse=True)
def _registry() -> Iterator[None]:
    """The kinds a test registers are dropped afterwards."""
    kept = dict(base._READERS)
    yield
    base._READERS.clear()
    base._READERS.update(kept)


#: The subjects Upper read, in order.
READ: list[str] = []


class Upper:
    """A subject read in upper case; one holding "!" is refused; "~" needs an exact rule."""

    def __init__(self, subject: str) -> None:
        READ.append(subject)
        self.text = subject.upper()
        self.objection: Objection | None = None
        if "!" in subject:
            self.objection = Objection(f"subject {subject!r} shouts")
        elif "~" in subject:
            self.objection = Objection("a tilde", unless_named_exactly=True)

    def denied_by(self, pattern: str) -> bool:
        return self.objection is None and fnmatch.fnmatchcase(self.text, pattern)

    def admitted_by(self, pattern: str) -> bool | str:
        if not fnmatch.fnmatchcase(self.text, pattern):
            return False
        return "too long" if len(self.text) > 10 else True


def test_the_built_in_kinds_are_listed_first_and_are_readers() -> None:
    assert subject_kinds()[:3] == ("path", "command", "text")
    for kind in ("path", "command", "text"):
        reader = base._reader_of(kind)
        assert isinstance(reader, SubjectReader)
        assert isinstance(reader("x"), ReadSubject)


def test_a_registered_kind_is_read_by_the_rules() -> None:
    register_subject_kind("upper", Upper)
    assert subject_kinds()[-1] == "upper"
    policy = PermissionPolicy(
        mode="rules",
        allow={"shout": ["HELLO*", "a~b"]},
        deny={"*": ["*SECRET*"]},
        escalate={"shout": ["BYE"]},
    )

    def check(subject: str) -> tuple[str, str | None, str]:
        decision = policy.check("shout", subject, {}, kind="upper")
        return decision.behavior, decision.matched_rule, decision.reason

    assert check("hello there") == ("deny", None, "too long")  # matched, but refused
    assert check("hello") == ("allow", "HELLO*", "allowed by rule 'HELLO*' for 'shout'")
    assert check("bye") == ("escalate", "BYE", "escalated by rule 'BYE' for 'shout'")
    assert check("my secret") == ("deny", "*SECRET*", "denied by rule '*SECRET*' for '*'")
    assert check("hey!") == ("deny", None, "subject 'hey!' shouts")
    assert check("a~b")[:2] == ("allow", "a~b")  # named exactly, as written
    assert check("A~B") == (
        "deny",
        None,
        "subject 'A~B' contains a tilde and no allow rule without wildcards names it",
    )
    assert check("other") == ("deny", None, "no rule matched; denied by default")


def test_a_registered_kinds_decisions_are_kept() -> None:
    register_subject_kind("upper", Upper)
    policy = PermissionPolicy(mode="rules", allow={"shout": ["HELLO"]})
    READ.clear()
    for _ in range(3):
        assert policy.check("shout", "hello", {}, kind="upper").allowed
    assert READ == ["hello"]


def test_an_unknown_kind_is_refused_naming_the_registered_ones() -> None:
    register_subject_kind("upper", Upper)
    policy = PermissionPolicy(mode="rules")
    with pytest.raises(ValueError, match=r"'path', 'command', 'text'.* or 'upper', not 'nope'"):
        policy.check("t", "x", {}, kind="nope")


def test_a_reader_that_raises_denies_the_call() -> None:
    def broken(subject: str) -> ReadSubject:
        raise RuntimeError(f"cannot read {subject}")

    register_subject_kind("broken", broken)
    decision = PermissionPolicy(mode="rules", allow={"*": ["*"]}).check(
        "t", "x", {}, kind="broken"
    )
    assert (decision.behavior, decision.matched_rule) == ("deny", None)
    assert decision.reason == (
        "the reader of subject kind 'broken' raised RuntimeError('cannot read x')"
    )


def test_registering_a_kind_twice_is_an_error_naming_it() -> None:
    register_subject_kind("upper", Upper)
    with pytest.raises(ConfigurationError, match="subject kind 'upper' is already registered"):
        register_subject_kind("upper", Upper)
    with pytest.raises(ConfigurationError, match="subject kind 'path' is already registered"):
        register_subject_kind("path", Upper)


@pytest.mark.parametrize("reader", [None, "Upper", 42])
def test_a_reader_must_be_callable(reader: object) -> None:
    with pytest.raises(ConfigurationError, match=f"kind 'loud' must be callable, not {reader!r}"):
        register_subject_kind("loud", reader)  # type: ignore[arg-type]
    assert "loud" not in subject_kinds()


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_kind_is_named_by_a_non_empty_string(name: object) -> None:
    with pytest.raises(ConfigurationError, match=f"non-empty string, not {name!r}"):
        register_subject_kind(name, Upper)  # type: ignore[arg-type]


def test_the_subjects_package_exports_what_governance_does() -> None:
    for name in subjects.__all__:
        assert getattr(subjects, name) is getattr(governance, name)
        assert name in governance.__all__


def test_the_old_permissions_module_warns_and_gives_the_same_objects() -> None:
    sys.modules.pop("lionexec.governance.permissions", None)
    with pytest.warns(DeprecationWarning, match="import its names from lionexec.governance"):
        old = importlib.import_module("lionexec.governance.permissions")
    assert old.__all__
    for name in old.__all__:
        assert getattr(old, name) is getattr(governance, name)


async def test_a_tools_own_kind_is_read_by_act_and_an_unregistered_one_denies() -> None:
    from lionexec import Branch, Tool

    def shout(word: str) -> str:
        """Say it loud.

        Args:
            word: what to say.
        """
        return word.upper()

    register_subject_kind("upper", Upper)
    policy = PermissionPolicy(mode="rules", allow={"shout": ["HELLO*"], "mumble": ["*"]})
    branch = Branch(policy=policy)
    branch.register_tools(Tool.from_function(shout, subject="word", subject_kind="upper"))
    branch.register_tools(
        Tool.from_function(shout, name="mumble", subject="word", subject_kind="never-registered")
    )
    allowed, denied, unknown = await branch.act(
        [
            {"id": "a", "function": "shout", "arguments": {"word": "hello"}},
            {"id": "b", "function": "shout", "arguments": {"word": "bye"}},
            {"id": "c", "function": "mumble", "arguments": {"word": "hm"}},
        ]
    )
    assert allowed.outcome == "completed" and allowed.output == "HELLO"
    assert denied.outcome == "denied"
    assert unknown.outcome == "denied"
    assert "'never-registered'" in unknown.error.message and "'upper'" in unknown.error.message
