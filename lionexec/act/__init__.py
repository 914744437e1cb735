"""The act layer: the branch and its one governed action transaction (ADR-0012 D2–D5)."""

from lionexec._failures import FailureLog, FailureStatistics, ReportedFailure
from lionexec.errors import DuplicateCallError

from .alcall import DEFAULT_PARAMS, AlcallParams, alcall
from .batch import RetryPolicy, Throttle, fan_out
from .branch import Branch, BranchStatistics, Strategy
from .envelope import Proposal, ProposedBatch, read_batch, read_proposal
from .evidence import (
    DEFAULT_SINK_CAPACITY,
    Evidence,
    EvidenceRecord,
    EvidenceSink,
    SinkFeed,
    SinkStatistics,
    WriteAhead,
)
from .log import ActionLogRecord, EventLog, JsonlSink
from .summary import BatchSummary
from .transaction import SUMMARY_LIMIT, VERBOSE_LIMIT, CallScope, CallTransaction

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
    "DuplicateCallError",
    "EventLog",
    "Evidence",
    "EvidenceRecord",
    "EvidenceSink",
    "FailureLog",
    "FailureStatistics",
    "JsonlSink",
    "Proposal",
    "ProposedBatch",
    "ReportedFailure",
    "RetryPolicy",
    "SinkFeed",
    "SinkStatistics",
    "Strategy",
    "Throttle",
    "WriteAhead",
    "alcall",
    "fan_out",
    "read_batch",
    "read_proposal",
]
