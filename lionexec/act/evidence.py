"""Deprecated: this module moved to :mod:`lionexec.act` (import its names from there).

Kept for one release: importing it warns once (``DeprecationWarning``) and gives the same
objects. The sink contract and records are exported by :mod:`lionexec.act` (and
:mod:`lionexec.act.sinks`); ``Evidence`` and ``SinkFeed`` are no longer public.
"""

import warnings

from ._evidence import DEFAULT_SINK_CAPACITY as DEFAULT_SINK_CAPACITY
from ._evidence import Evidence as Evidence
from ._evidence import SinkFeed as SinkFeed
from ._evidence import SinkStatistics as SinkStatistics
from .sinks.base import EvidenceRecord as EvidenceRecord
from .sinks.base import EvidenceSink as EvidenceSink
from .sinks.base import WriteAhead as WriteAhead
from .sinks.base import WriteAheadReply as WriteAheadReply

__all__ = [
    "DEFAULT_SINK_CAPACITY",
    "Evidence",
    "EvidenceRecord",
    "EvidenceSink",
    "SinkFeed",
    "SinkStatistics",
    "WriteAhead",
    "WriteAheadReply",
]

warnings.warn(
    "lionexec.act.evidence is deprecated: import EvidenceSink, WriteAhead, WriteAheadReply, "
    "EvidenceRecord and SinkStatistics from lionexec.act",
    DeprecationWarning,
    stacklevel=2,
)
