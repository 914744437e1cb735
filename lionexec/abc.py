"""Every extension protocol of lionexec, in one place (as :mod:`trio.abc` is for trio).

Each protocol is a :class:`typing.Protocol`: implement its members and lionexec accepts your
object, no subclassing needed (subclassing is fine too, and lets a type checker check you).
Each class's docstring is its contract: what lionexec calls when, from which thread, what may
block, and what cancellation does. The built-in implementations live beside the protocol, one
folder per extension point (see ``docs/architecture.md``):

=======================================  ==============================================
protocol                                 implementations
=======================================  ==============================================
:class:`EvidenceSink`,                   ``lionexec/act/sinks/``: :class:`~lionexec.act.JsonlSink`;
:class:`DurableEvidenceSink`             the journal's sink (``lionexec/journal/``)
:class:`Backend`, :class:`Store`         ``lionexec/journal/backends/``: memory, SQLite, PostgreSQL
:class:`SubjectReader`,                  ``lionexec/governance/subjects/``: ``path``, ``command``,
:class:`ReadSubject`                     ``text``; yours through
                                         :func:`~lionexec.governance.register_subject_kind`
:class:`LimitState`, :class:`Limiter`    ``lionexec/limits/``: in memory, and the workers' database
:class:`ProviderFormat`                  ``lionexec/conversation/formats/``: ``chat``,
                                         ``responses``, ``anthropic``
:class:`ModelFormat`,                    ``lionexec/models/formats/``: the same three APIs'
:class:`StreamAssembler`                 requests, responses and streams
=======================================  ==============================================
"""

from __future__ import annotations

from ._public import publish as _publish
from .act.sinks.base import DurableEvidenceSink as DurableEvidenceSink
from .act.sinks.base import EvidenceSink as EvidenceSink
from .conversation.formats.base import ProviderFormat as ProviderFormat
from .governance.subjects.base import ReadSubject as ReadSubject
from .governance.subjects.base import SubjectReader as SubjectReader
from .journal.backends.base import Backend as Backend
from .journal.backends.base import Store as Store
from .limits.base import Limiter as Limiter
from .limits.base import LimitState as LimitState
from .models.formats.base import ModelFormat as ModelFormat
from .models.formats.base import StreamAssembler as StreamAssembler

__all__ = [
    "Backend",
    "DurableEvidenceSink",
    "EvidenceSink",
    "LimitState",
    "Limiter",
    "ModelFormat",
    "ProviderFormat",
    "ReadSubject",
    "Store",
    "StreamAssembler",
    "SubjectReader",
]

_publish(
    __name__,
    globals(),
    include=(
        "lionexec.act.sinks.base",
        "lionexec.conversation.formats.base",
        "lionexec.governance.subjects.base",
        "lionexec.journal.backends.base",
        "lionexec.limits.base",
        "lionexec.models.formats.base",
    ),
)
