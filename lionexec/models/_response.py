"""What a model call records: the normalized response, whichever API answered."""

from __future__ import annotations

from typing import Any, Final

import attrs

__all__ = ["FINISH_REASONS", "ModelResponse", "Usage"]

#: The finish reasons a :class:`ModelResponse` may carry (Responses statuses are mapped onto
#: them); any other value received is an :class:`UnknownFinishReasonError`.
FINISH_REASONS: Final = frozenset({"stop", "length", "tool_calls", "content_filter"})


@attrs.frozen
class Usage:
    """Tokens a response reports (``prompt``/``input`` and ``completion``/``output``)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.frozen
class ModelResponse:
    """A model's answer, normalized.

    Attributes:
        text: the assistant text (``""`` when it only proposed tool calls).
        tool_calls: OpenAI ``tool_calls`` items (``{"id", "type": "function", "function":
            {"name", "arguments"}}``, arguments a JSON string as sent), in the order proposed.
        finish_reason: one of :data:`FINISH_REASONS`.
        usage: the reported usage, or ``None``.
        model: the model name the provider reports, or ``None``.
        id: the provider's response id, or ``None``.
    """

    text: str
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None

    def message(self) -> dict[str, Any]:
        """The OpenAI chat assistant message (``role``, ``content``, ``tool_calls`` if any)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        return message
