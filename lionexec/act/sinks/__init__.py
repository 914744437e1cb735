"""Evidence sinks: the contract (:mod:`lionexec.act.sinks.base`) and lionexec's own sinks.

Every name here is also exported by :mod:`lionexec.act`, which is its documented home.
"""

from ._jsonl import JsonlSink as JsonlSink
from .base import DurableEvidenceSink as DurableEvidenceSink
from .base import EvidenceRecord as EvidenceRecord
from .base import EvidenceSink as EvidenceSink
from .base import WriteAhead as WriteAhead
from .base import WriteAheadReply as WriteAheadReply

__all__ = [
    "EvidenceRecord",
    "JsonlSink",
    "WriteAhead",
    "WriteAheadReply",
]
