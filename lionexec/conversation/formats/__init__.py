"""Provider formats: the conversation side of each provider API lionexec speaks.

One home per API, each a :class:`ProviderFormat` (the contract, in :mod:`.base`, with the
names and the plan the three exports share):

=============== ============================ ================================================
name            API                          history exported by
=============== ============================ ================================================
``"chat"``      OpenAI Chat Completions      :func:`~lionexec.conversation.to_openai`
``"responses"`` OpenAI Responses             :func:`~lionexec.conversation.to_responses`
``"anthropic"`` Anthropic Messages           :func:`~lionexec.conversation.to_anthropic`
=============== ============================ ================================================

:func:`provider_format` returns the registered format for a name, :func:`resolve_format` the
canonical name (``"openai"`` is a deprecated alias of ``"chat"``). The exports themselves are
homed in :mod:`lionexec.conversation`. This package also holds the per-API helpers the
model-call side builds requests with (:func:`anthropic_tool_id`, :func:`anthropic_part`,
:func:`responses_part`, :func:`part_text`, :func:`dumps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ..._public import publish as _publish
from ._anthropic import ANTHROPIC as _ANTHROPIC
from ._anthropic import AnthropicExport as AnthropicExport
from ._anthropic import AnthropicMessageParam as AnthropicMessageParam
from ._anthropic import anthropic_part as anthropic_part
from ._anthropic import anthropic_tool_id as anthropic_tool_id
from ._anthropic import to_anthropic as to_anthropic
from ._chat import CHAT as _CHAT
from ._chat import ChatMessageParam as ChatMessageParam
from ._chat import to_openai as to_openai
from ._responses import RESPONSES as _RESPONSES
from ._responses import ResponsesInputItem as ResponsesInputItem
from ._responses import responses_part as responses_part
from ._responses import to_responses as to_responses
from .base import FORMAT_ALIASES as FORMAT_ALIASES
from .base import FORMAT_NAMES as FORMAT_NAMES
from .base import NO_RESPONSE as NO_RESPONSE
from .base import FormatName as FormatName
from .base import ProviderFormat as ProviderFormat
from .base import ProviderTurn as ProviderTurn
from .base import _canonical
from .base import dumps as dumps
from .base import part_text as part_text
from .base import resolve_format as resolve_format
from .base import result_text as result_text

__all__ = [
    "FORMATS",
    "FORMAT_ALIASES",
    "FORMAT_NAMES",
    "NO_RESPONSE",
    "AnthropicExport",
    "AnthropicMessageParam",
    "ChatMessageParam",
    "FormatName",
    "ProviderTurn",
    "ResponsesInputItem",
    "anthropic_part",
    "anthropic_tool_id",
    "dumps",
    "part_text",
    "provider_format",
    "resolve_format",
    "responses_part",
    "result_text",
    "to_anthropic",
    "to_openai",
    "to_responses",
]

#: Every registered format, by canonical name (the order of ``FORMAT_NAMES``).
FORMATS: Final[Mapping[FormatName, ProviderFormat]] = MappingProxyType(
    {"chat": _CHAT, "responses": _RESPONSES, "anthropic": _ANTHROPIC}
)


def provider_format(name: str) -> ProviderFormat:
    """The registered :class:`ProviderFormat` for *name*, read as
    :func:`resolve_format` reads it (a deprecated alias warns and resolves).

    Raises:
        ConfigurationError: *name* names no format (the message lists the valid names).
    """
    return FORMATS[_canonical(name, 3)]


#: The names homed in :mod:`lionexec.conversation` (which publishes them): the exports, as
#: before there were formats.
_CONVERSATION_NAMES: Final = frozenset(
    {"AnthropicExport", "result_text", "to_anthropic", "to_openai", "to_responses"}
)
_publish(__name__, {**globals(), "__all__": [n for n in __all__ if n not in _CONVERSATION_NAMES]})
