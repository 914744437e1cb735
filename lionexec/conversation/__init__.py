"""The conversation layer: messages, the linked message history, and provider exports."""

from .export import NO_RESPONSE, result_text, to_anthropic, to_openai
from .history import CallbackFailure, MessageCallback, MessageManager
from .messages import (
    OUTCOME_STATUS,
    ActionOutcome,
    ActionRequest,
    ActionRequestContent,
    ActionResponse,
    ActionResponseContent,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    Message,
    MessageRole,
    System,
    new_call_id,
)

__all__ = [
    "NO_RESPONSE",
    "OUTCOME_STATUS",
    "ActionOutcome",
    "ActionRequest",
    "ActionRequestContent",
    "ActionResponse",
    "ActionResponseContent",
    "AssistantResponse",
    "CallbackFailure",
    "ErrorInfo",
    "Instruction",
    "Message",
    "MessageCallback",
    "MessageManager",
    "MessageRole",
    "System",
    "new_call_id",
    "result_text",
    "to_anthropic",
    "to_openai",
]
