"""Deprecated: model calls moved to :mod:`lionexec.models` (``Endpoint``, ``ModelCall``,
``ModelResponse``, ``Usage``, ``FINISH_REASONS``, ``build_payload``) and
:mod:`lionexec.models.formats` (each provider format's requests, responses and streams).

Kept for one release: importing it warns once (``DeprecationWarning``) and gives the same
objects. ``Api`` is :data:`lionexec.conversation.formats.FormatName`.
"""

import warnings

from lionexec.conversation.formats import FormatName as Api

from ._call import Endpoint as Endpoint
from ._call import ModelCall as ModelCall
from ._call import build_payload as build_payload
from ._call import estimate_tokens as estimate_tokens
from ._call import parse_body as parse_body
from ._call import text_delta as text_delta
from ._response import FINISH_REASONS as FINISH_REASONS
from ._response import ModelResponse as ModelResponse
from ._response import Usage as Usage
from .formats import ANTHROPIC_MAX_TOKENS as ANTHROPIC_MAX_TOKENS
from .formats import ANTHROPIC_VERSION as ANTHROPIC_VERSION
from .formats._anthropic import parse_anthropic as parse_anthropic
from .formats._chat import parse_chat as parse_chat
from .formats._responses import parse_responses as parse_responses

__all__ = [
    "ANTHROPIC_MAX_TOKENS",
    "ANTHROPIC_VERSION",
    "FINISH_REASONS",
    "Api",
    "Endpoint",
    "ModelCall",
    "ModelResponse",
    "Usage",
    "build_payload",
    "estimate_tokens",
    "parse_anthropic",
    "parse_body",
    "parse_chat",
    "parse_responses",
    "text_delta",
]

warnings.warn(
    "lionexec.models.call is deprecated: import Endpoint, ModelCall, ModelResponse, Usage, "
    "FINISH_REASONS and build_payload from lionexec.models, the per-API constants from "
    "lionexec.models.formats, and Api as FormatName from lionexec.conversation.formats",
    DeprecationWarning,
    stacklevel=2,
)
