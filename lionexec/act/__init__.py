"""The act layer: the branch and its one governed action transaction (ADR-0012 D2–D5)."""

from .._public import publish as _publish
from .alcall import DEFAULT_PARAMS as DEFAULT_PARAMS
from .alcall import AlcallParams as AlcallParams
from .alcall import alcall as alcall
from .batch import RetryPolicy as RetryPolicy
from .batch import Throttle as Throttle
from .batch import fan_out as fan_out
from .branch import Branch as Branch
from .branch import BranchStatistics as BranchStatistics
from .branch import Strategy as Strategy
from .envelope import Proposal as Proposal
from .envelope import ProposedBatch as ProposedBatch
from .envelope import read_batch as read_batch
from .envelope import read_proposal as read_proposal
from .evidence import DEFAULT_SINK_CAPACITY as DEFAULT_SINK_CAPACITY
from .evidence import Evidence as Evidence
from .evidence import EvidenceRecord as EvidenceRecord
from .evidence import EvidenceSink as EvidenceSink
from .evidence import SinkFeed as SinkFeed
from .evidence import SinkStatistics as SinkStatistics
from .evidence import WriteAhead as WriteAhead
from .evidence import WriteAheadReply as WriteAheadReply
from .log import ActionLogRecord as ActionLogRecord
from .log import EventLog as EventLog
from .log import JsonlSink as JsonlSink
from .summary import BatchSummary as BatchSummary
from .transaction import SUMMARY_LIMIT as SUMMARY_LIMIT
from .transaction import VERBOSE_LIMIT as VERBOSE_LIMIT
from .transaction import CallScope as CallScope
from .transaction import CallTransaction as CallTransaction

__all__ = [
    "DEFAULT_PARAMS",
    "DEFAULT_SINK_CAPACITY",
    "SUMMARY_LIMIT",
    "VERBOSE_LIMIT",
    "ActionLogRecord",
    "AlcallParams",
    "BatchSummary",
    "Branch",
    "BranchStatistics",
    "CallScope",
    "CallTransaction",
    "EventLog",
    "Evidence",
    "EvidenceRecord",
    "EvidenceSink",
    "JsonlSink",
    "Proposal",
    "ProposedBatch",
    "RetryPolicy",
    "SinkFeed",
    "SinkStatistics",
    "Strategy",
    "Throttle",
    "WriteAhead",
    "WriteAheadReply",
    "alcall",
    "fan_out",
    "read_batch",
    "read_proposal",
]

_publish(__name__, globals())
