"""The errors a journal raises; each names what was wrong."""

from __future__ import annotations

from lionexec.errors import LionexecError

__all__ = [
    "ApprovalClosed",
    "ApprovalError",
    "ApprovalNotFound",
    "IdempotencyKeyConflict",
    "JournalConnectionError",
    "JournalError",
    "JournalSchemaError",
    "NotAJournalError",
]


class JournalError(LionexecError):
    """A journal could not do what was asked; nothing committed before was lost."""


class NotAJournalError(JournalError, ValueError):
    """The file or database is not a lionexec journal (corrupt, or another program's).

    Attributes:
        target: the path or URL (password removed) that was opened.
    """

    def __init__(self, message: str, *, target: str) -> None:
        super().__init__(message)
        self.target = target


class JournalSchemaError(JournalError):
    """The journal was written by a newer lionexec (its schema version is unknown here).

    Attributes:
        found: the database's schema version.
        supported: the newest version this lionexec knows.
    """

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class JournalConnectionError(JournalError, ConnectionError):
    """The database cannot be reached (a wrong URL, a server down, a connection lost).

    A batch whose commit failed this way was not committed: its calls fail at the
    write-ahead point without running, or (for outcomes) stay unanswered in the journal
    until recovery. Also raised when a group commit did not end within the journal's
    ``commit_timeout``: that commit may or may not have landed, and recovery resolves it.
    """


class IdempotencyKeyConflict(JournalError, ValueError):
    """One idempotency key used by two calls with different arguments.

    Attributes:
        key: the idempotency key.
        first_call_id: the call that holds the key.
        call_id: the call that was refused.
    """

    def __init__(self, message: str, *, key: str, first_call_id: str, call_id: str) -> None:
        super().__init__(message)
        self.key = key
        self.first_call_id = first_call_id
        self.call_id = call_id


class ApprovalError(JournalError):
    """An approval could not be decided or used as asked.

    Attributes:
        approval_id: the approval.
    """

    def __init__(self, message: str, *, approval_id: str) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ApprovalNotFound(ApprovalError, LookupError):
    """No approval has this id."""


class ApprovalClosed(ApprovalError):
    """The approval is no longer pending (approved, used, rejected or expired), or does not
    cover the call that presents it (other arguments, another policy, already used).

    Attributes:
        approval_id: the approval.
        state: its state when it was refused.
    """

    def __init__(self, message: str, *, approval_id: str, state: str) -> None:
        super().__init__(message, approval_id=approval_id)
        self.state = state
