"""Provider formats, model-call side: each API's requests, responses and streams.

One home per API, each a :class:`ModelFormat` (the contract, in :mod:`.base`), built on the
conversation side of the same API (:mod:`lionexec.conversation.formats`):

=============== ============================ =====================
name            API                          path
=============== ============================ =====================
``"chat"``      OpenAI Chat Completions      ``/chat/completions``
``"responses"`` OpenAI Responses             ``/responses``
``"anthropic"`` Anthropic Messages           ``/messages``
=============== ============================ =====================

:func:`model_format` returns the registered format for a name (``"openai"`` is a deprecated
alias of ``"chat"``). Needs nothing beyond lionexec's own dependencies: the HTTP side
(:class:`~lionexec.models.ModelCall`) is the one that needs ``httpx``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from lionexec.conversation.formats import FormatName
from lionexec.conversation.formats.base import _canonical

from ..._public import publish as _publish
from ._anthropic import ANTHROPIC as _ANTHROPIC
from ._anthropic import ANTHROPIC_MAX_TOKENS as ANTHROPIC_MAX_TOKENS
from ._anthropic import ANTHROPIC_VERSION as ANTHROPIC_VERSION
from ._chat import CHAT as _CHAT
from ._responses import RESPONSES as _RESPONSES
from .base import ModelFormat as ModelFormat
from .base import StreamAssembler as StreamAssembler

__all__ = [
    "ANTHROPIC_MAX_TOKENS",
    "ANTHROPIC_VERSION",
    "MODEL_FORMATS",
    "model_format",
]

#: Every registered format, by canonical name (the order of
#: :data:`~lionexec.conversation.formats.FORMAT_NAMES`).
MODEL_FORMATS: Final[Mapping[FormatName, ModelFormat]] = MappingProxyType(
    {"chat": _CHAT, "responses": _RESPONSES, "anthropic": _ANTHROPIC}
)


def model_format(name: str) -> ModelFormat:
    """The registered :class:`ModelFormat` for *name*, read as
    :func:`~lionexec.conversation.formats.resolve_format` reads it (a deprecated alias warns
    and resolves).

    Raises:
        ConfigurationError: *name* names no format (the message lists the valid names).
    """
    return MODEL_FORMATS[_canonical(name, 3)]


_publish(__name__, globals())
