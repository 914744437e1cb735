"""Model calls as events, a rate-limited processor for them, and the loop joining a model to
:meth:`Branch.act <lionexec.Branch.act>` (layer 5).

Three provider formats are spoken (``"chat"``, ``"responses"``, ``"anthropic"``): each API's
requests, responses and streams have their home in :mod:`lionexec.models.formats`.

The limiter, the processor, the responses and the errors need nothing beyond lionexec's own
dependencies; ``ModelCall``, ``build_payload``, ``Model`` and the loop need the ``http`` extra
(``httpx``) and are imported on first use, so ``import lionexec.models`` alone does not import
``httpx``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from .. import limits as _limits
from .._public import publish as _publish
from ._errors import MalformedResponseError as MalformedResponseError
from ._errors import ModelConnectionError as ModelConnectionError
from ._errors import ModelError as ModelError
from ._errors import ProviderError as ProviderError
from ._errors import StreamTruncatedError as StreamTruncatedError
from ._errors import UnknownFinishReasonError as UnknownFinishReasonError
from ._processor import RateLimitedProcessor as RateLimitedProcessor
from ._processor import RateLimitedStatistics as RateLimitedStatistics
from ._response import FINISH_REASONS as FINISH_REASONS
from ._response import ModelResponse as ModelResponse
from ._response import Usage as Usage

if TYPE_CHECKING:
    from ._call import Endpoint, ModelCall, build_payload
    from ._loop import (
        LoopResult,
        Model,
        RunEvent,
        TextDelta,
        ToolCallsProposed,
        ToolResult,
        TurnCompleted,
        run,
        run_stream,
    )

__all__ = [
    "FINISH_REASONS",
    "Endpoint",
    "LoopResult",
    "MalformedResponseError",
    "Model",
    "ModelCall",
    "ModelConnectionError",
    "ModelError",
    "ModelResponse",
    "ProviderError",
    "RateLimitedProcessor",
    "RateLimitedStatistics",
    "RunEvent",
    "StreamTruncatedError",
    "TextDelta",
    "ToolCallsProposed",
    "ToolResult",
    "TurnCompleted",
    "UnknownFinishReasonError",
    "Usage",
    "build_payload",
    "run",
    "run_stream",
]

_LAZY = {
    "Endpoint": "_call",
    "ModelCall": "_call",
    "build_payload": "_call",
    "LoopResult": "_loop",
    "Model": "_loop",
    "RunEvent": "_loop",
    "TextDelta": "_loop",
    "ToolCallsProposed": "_loop",
    "ToolResult": "_loop",
    "TurnCompleted": "_loop",
    "run": "_loop",
    "run_stream": "_loop",
}


#: Names that moved to :mod:`lionexec.limits`; still served here, with a warning, for one release.
_MOVED = frozenset({"BudgetExceededError", "RateLimiter", "RateLimiterStatistics"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"lionexec.models.{name} is deprecated; import it from lionexec.limits instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_limits, name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    _publish(__name__, {"__all__": [name], name: value})
    return value


_publish(__name__, globals())
