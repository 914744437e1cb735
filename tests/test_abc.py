"""``lionexec.abc``: every extension protocol has its home there, and the implementations
lionexec ships satisfy them, as a user's own (not subclassing anything) can."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import lionexec.abc as abc
from lionexec.act import JsonlSink
from lionexec.conversation.formats import FORMAT_NAMES, provider_format
from lionexec.governance import subject_kinds
from lionexec.governance.subjects import base as subjects_base
from lionexec.journal import MemoryJournal
from lionexec.journal.backends import MemoryBackend, MemoryStore, SqliteBackend
from lionexec.limits import Limit, LocalLimiter, StateInMemory
from lionexec.models.formats import model_format


def test_every_protocol_lives_in_lionexec_abc_and_is_checkable() -> None:
    assert abc.__all__ == sorted(abc.__all__, key=lambda n: (not n[:1].isupper(), n))
    for name in abc.__all__:
        protocol = getattr(abc, name)
        assert protocol.__module__ == "lionexec.abc", name
        assert getattr(protocol, "_is_runtime_protocol", False), f"{name} is not checkable"
        assert len(protocol.__doc__ or "") > 300, f"{name} does not document its contract"


def test_the_shipped_implementations_satisfy_their_protocols(tmp_path: pathlib.Path) -> None:
    assert isinstance(JsonlSink(tmp_path / "log.jsonl", dumps=json.dumps), abc.EvidenceSink)
    assert isinstance(MemoryBackend(), abc.Backend)
    assert isinstance(SqliteBackend(str(tmp_path / "j.db")), abc.Backend)
    assert isinstance(MemoryStore(), abc.Store)
    assert isinstance(StateInMemory(), abc.LimitState)
    assert isinstance(LocalLimiter({"t": Limit(rate=1, period=1.0)}), abc.Limiter)
    for name in FORMAT_NAMES:
        assert isinstance(provider_format(name), abc.ProviderFormat), name
        assert isinstance(model_format(name), abc.ModelFormat), name
    for kind in subject_kinds():
        reader = subjects_base._reader_of(kind)
        assert isinstance(reader, abc.SubjectReader), kind
        assert isinstance(reader("/data/a.txt"), abc.ReadSubject), kind


async def test_the_journals_sink_is_a_durable_evidence_sink() -> None:
    async with MemoryJournal() as journal:
        branch = await journal.branch()
        sinks = [s for s in branch.sinks if isinstance(s, abc.DurableEvidenceSink)]
        assert sinks and all(isinstance(s, abc.EvidenceSink) for s in sinks)


def test_a_users_own_sink_needs_no_base_class() -> None:
    class Printer:
        async def write_ahead(self, entry: object) -> None:
            return None

        async def write(self, records: Sequence[object]) -> None:
            return None

        async def aclose(self) -> None:
            return None

    assert isinstance(Printer(), abc.EvidenceSink)
    assert not isinstance(Printer(), abc.DurableEvidenceSink)
    assert not isinstance(object(), abc.EvidenceSink)
