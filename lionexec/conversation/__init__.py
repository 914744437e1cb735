"""The conversation layer: messages, the linked message history, and provider exports.

The exports are one per provider format: :mod:`lionexec.conversation.formats` holds the
formats (one module per API) and their contract,
:class:`~lionexec.abc.ProviderFormat`.
"""

from .._public import publish as _publish
from ._history import CallbackFailure as CallbackFailure
from ._history import MessageCallback as MessageCallback
from ._history import MessageManager as MessageManager
from ._messages import OUTCOME_STATUS as OUTCOME_STATUS
from ._messages import TURN_APIS as TURN_APIS
from ._messages import ActionOutcome as ActionOutcome
from ._messages import ActionRequest as ActionRequest
from ._messages import ActionRequestContent as ActionRequestContent
from ._messages import ActionResponse as ActionResponse
from ._messages import ActionResponseContent as ActionResponseContent
from ._messages import AssistantResponse as AssistantResponse
from ._messages import ErrorInfo as ErrorInfo
from ._messages import Instruction as Instruction
from ._messages import Message as Message
from ._messages import MessageRole as MessageRole
from ._messages import System as System
from ._messages import new_call_id as new_call_id
from ._parts import ContentPart as ContentPart
from ._parts import FilePart as FilePart
from ._parts import ImagePart as ImagePart
from ._parts import TextPart as TextPart
from .formats import NO_RESPONSE as NO_RESPONSE
from .formats import AnthropicExport as AnthropicExport
from .formats import result_text as result_text
from .formats import to_anthropic as to_anthropic
from .formats import to_openai as to_openai
from .formats import to_responses as to_responses

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
