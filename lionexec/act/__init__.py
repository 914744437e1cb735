"""The act layer: the branch and its one governed action transaction (ADR-0012 D2–D5)."""

from .alcall import AlcallParams, alcall
from .branch import Branch, Strategy
from .envelope import Proposal, read_proposal
from .log import ActionLogRecord, EventLog, ReportedFailure
from .summary import BatchSummary
from .transaction import SUMMARY_LIMIT, VERBOSE_LIMIT

__all__ = [
    "SUMMARY_LIMIT",
    "VERBOSE_LIMIT",
    "ActionLogRecord",
    "AlcallParams",
    "BatchSummary",
    "Branch",
    "EventLog",
    "Proposal",
    "ReportedFailure",
    "Strategy",
    "alcall",
    "read_proposal",
]
