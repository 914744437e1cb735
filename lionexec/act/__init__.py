"""The act layer: the branch, and the one governed, recorded transaction each tool call runs.

:class:`Branch` runs proposed tool calls (:func:`read_batch` reads them from what a model
sent) through the governance seams, records each call's evidence the moment its outcome is
known, and feeds that evidence to its sinks (:class:`EvidenceSink`, :class:`JsonlSink`; the
sinks are also importable from :mod:`lionexec.act.sinks`). :func:`alcall` runs any function
over many inputs with the same batch parameters (:class:`AlcallParams`).
"""

from .._public import publish as _publish
from ._alcall import DEFAULT_PARAMS as DEFAULT_PARAMS
from ._alcall import AlcallParams as AlcallParams
from ._alcall import alcall as alcall
from ._batch import RetryPolicy as RetryPolicy
from ._branch import Branch as Branch
from ._branch import BranchStatistics as BranchStatistics
from ._branch import Strategy as Strategy
from ._copies import SUMMARY_LIMIT as SUMMARY_LIMIT
from ._copies import VERBOSE_LIMIT as VERBOSE_LIMIT
from ._envelope import MAX_ARGUMENT_CHARS as MAX_ARGUMENT_CHARS
from ._envelope import MAX_ARGUMENT_DEPTH as MAX_ARGUMENT_DEPTH
from ._envelope import MAX_CALL_ID_CHARS as MAX_CALL_ID_CHARS
from ._envelope import Proposal as Proposal
from ._envelope import ProposedBatch as ProposedBatch
from ._envelope import read_batch as read_batch
from ._envelope import read_proposal as read_proposal
from ._evidence import DEFAULT_SINK_CAPACITY as DEFAULT_SINK_CAPACITY
from ._evidence import SinkStatistics as SinkStatistics
from ._log import ActionLogRecord as ActionLogRecord
from ._log import EventLog as EventLog
from ._summary import BatchSummary as BatchSummary
from .sinks import DurableEvidenceSink as DurableEvidenceSink
from .sinks import EvidenceRecord as EvidenceRecord
from .sinks import EvidenceSink as EvidenceSink
from .sinks import JsonlSink as JsonlSink
from .sinks import WriteAhead as WriteAhead
from .sinks import WriteAheadReply as WriteAheadReply

__all__ = [
    "DEFAULT_PARAMS",
    "DEFAULT_SINK_CAPACITY",
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_CALL_ID_CHARS",
    "SUMMARY_LIMIT",
    "VERBOSE_LIMIT",
    "ActionLogRecord",
    "AlcallParams",
    "BatchSummary",
    "Branch",
    "BranchStatistics",
    "EventLog",
    "EvidenceRecord",
    "JsonlSink",
    "Proposal",
    "ProposedBatch",
    "RetryPolicy",
    "SinkStatistics",
    "Strategy",
    "WriteAhead",
    "WriteAheadReply",
    "alcall",
    "read_batch",
    "read_proposal",
]

# The sinks' contract and lionexec's own sinks live in the sinks subpackage; this package is
# their documented home (reprs, pickles and the API docs name lionexec.act).
_publish(__name__, globals(), include=("lionexec.act.sinks.base", "lionexec.act.sinks._jsonl"))
