"""The conversation layer: messages, the linked message history, and provider exports.

The exports are one per provider format: :mod:`lionexec.conversation.formats` holds the
formats (one module per API) and their contract,
:class:`~lionexec.abc.ProviderFormat`.
"""

from .._public import publish as _publish
from .formats import NO_RESPONSE as NO_RESPONSE
from .formats import AnthropicExport as AnthropicExport
from .formats import result_text as result_text
from .formats import to_anthropic as to_anthropic
from .formats import to_openai as to_openai
from .formats import to_responses as to_responses
from .history import CallbackFailure as CallbackFailure
from .history import MessageCallback as MessageCallback
from .history import MessageManager as MessageManager
from .messages import OUTCOME_STATUS as OUTCOME_STATUS
from .messages import TURN_APIS as TURN_APIS
from .messages import ActionOutcome as ActionOutcome
from .messages import ActionRequest as ActionRequest
from .messages import ActionRequestContent as ActionRequestContent
from .messages import ActionResponse as ActionResponse
from .messages import ActionResponseContent as ActionResponseContent
from .messages import AssistantResponse as AssistantResponse
from .messages import ErrorInfo as ErrorInfo
from .messages import Instruction as Instruction
from .messages import Message as Message
from .messages import MessageRole as MessageRole
from .messages import System as System
from .messages import new_call_id as new_call_id
from .parts import ContentPart as ContentPart
from .parts import FilePart as FilePart
from .parts import ImagePart as ImagePart
from .parts import TextPart as TextPart

__all__ = [
    "NO_RESPONSE",
    "OUTCOME_STATUS",
    "TURN_APIS",
    "ActionOutcome",
    "ActionRequest",
    "ActionRequestContent",
    "ActionResponse",
    "ActionResponseContent",
    "AnthropicExport",
    "AssistantResponse",
    "CallbackFailure",
    "ContentPart",
    "ErrorInfo",
    "FilePart",
    "ImagePart",
    "Instruction",
    "Message",
    "MessageCallback",
    "MessageManager",
    "MessageRole",
    "System",
    "TextPart",
    "new_call_id",
    "result_text",
    "to_anthropic",
    "to_openai",
    "to_responses",
]

#: The modules (of the formats folder) that define names this package is the home of.
_FORMAT_MODULES = tuple(
    f"{__name__}.formats.{module}" for module in ("base", "_chat", "_responses", "_anthropic")
)
_publish(__name__, globals(), include=_FORMAT_MODULES)
