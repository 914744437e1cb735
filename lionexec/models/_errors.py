"""The errors a model call records: provider refusals and responses that cannot be read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lionexec.errors import LionexecError

__all__ = [
    "MalformedResponseError",
    "ModelConnectionError",
    "ModelError",
    "ProviderError",
    "StreamTruncatedError",
    "UnknownFinishReasonError",
]


class ModelError(LionexecError):
    """Root of the errors a :class:`~lionexec.models.ModelCall` captures."""


class ProviderError(ModelError):
    """The provider answered with an HTTP error status.

    Attributes:
        status_code: the HTTP status (``429``, ``500``, ...).
        body: the provider's error body: the parsed JSON object when it was one, else the text
            (cut to 4,096 characters).
        retry_after: seconds the provider asked us to wait (``retry-after-ms`` or
            ``Retry-After``), or ``None`` when it did not say.
        headers: the response's ``x-ratelimit-*`` and ``retry-after*`` headers, lower-cased.
    """

    def __init__(
        self,
        status_code: int,
        body: object,
        *,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after
        self.headers: dict[str, str] = dict(headers or {})
        detail = _error_detail(body)
        wait = f"; retry after {retry_after:g}s" if retry_after is not None else ""
        super().__init__(f"provider answered HTTP {status_code}{wait}: {detail}")

    @property
    def rate_limited(self) -> bool:
        """Whether this is a ``429 Too Many Requests``."""
        return self.status_code == 429


class MalformedResponseError(ModelError, ValueError):
    """The provider's body (or one stream chunk) is not the JSON shape expected.

    Attributes:
        body: the offending text, cut to 4,096 characters.
    """

    def __init__(self, message: str, *, body: str = "") -> None:
        super().__init__(message)
        self.body = body[:4096]


class ModelConnectionError(ModelError, ConnectionError):
    """The request could not be sent or its response not received (network, timeout)."""


class StreamTruncatedError(ModelError):
    """A streamed response ended before its end marker (connection closed mid-stream).

    Attributes:
        chunks: how many chunks had arrived.
    """

    def __init__(self, message: str, *, chunks: int) -> None:
        super().__init__(message)
        self.chunks = chunks


class UnknownFinishReasonError(ModelError, ValueError):
    """The response's finish reason is none that lionexec knows how to act on.

    Attributes:
        finish_reason: the value received (``repr``-cut to 200 characters).
    """

    def __init__(self, finish_reason: object) -> None:
        shown = repr(finish_reason)[:200]
        super().__init__(f"unknown finish reason {shown}")
        self.finish_reason = shown


def _error_detail(body: object) -> str:
    if isinstance(body, Mapping):
        error: Any = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])[:500]
        return repr(body)[:500]
    return repr(body)[:500]
