"""Deprecated: the history exports moved to :mod:`lionexec.conversation` (the exports) and
:mod:`lionexec.conversation.formats` (one module per provider API, and their helpers).

Kept for one release: importing it warns once (``DeprecationWarning``) and gives the same
objects.
"""

import warnings

from .formats import NO_RESPONSE as NO_RESPONSE
from .formats import AnthropicExport as AnthropicExport
from .formats import AnthropicMessageParam as AnthropicMessageParam
from .formats import ChatMessageParam as ChatMessageParam
from .formats import ResponsesInputItem as ResponsesInputItem
from .formats import anthropic_part as anthropic_part
from .formats import anthropic_tool_id as anthropic_tool_id
from .formats import dumps as dumps
from .formats import part_text as part_text
from .formats import responses_part as responses_part
from .formats import result_text as result_text
from .formats import to_anthropic as to_anthropic
from .formats import to_openai as to_openai
from .formats import to_responses as to_responses

__all__ = [
    "NO_RESPONSE",
    "AnthropicExport",
    "AnthropicMessageParam",
    "ChatMessageParam",
    "ResponsesInputItem",
    "anthropic_part",
    "anthropic_tool_id",
    "dumps",
    "part_text",
    "responses_part",
    "result_text",
    "to_anthropic",
    "to_openai",
    "to_responses",
]

warnings.warn(
    "lionexec.conversation.export is deprecated: import to_openai, to_responses, "
    "to_anthropic, result_text, NO_RESPONSE and AnthropicExport from lionexec.conversation, "
    "and anthropic_tool_id, anthropic_part, responses_part, part_text, dumps and the request "
    "types from lionexec.conversation.formats",
    DeprecationWarning,
    stacklevel=2,
)
