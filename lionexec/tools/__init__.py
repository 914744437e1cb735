"""The tools layer: tool descriptors, their calls as events, and the registry.

Imports only :mod:`lionexec.engine` and :mod:`lionexec.errors`.
"""

from .._public import publish as _publish
from ._arguments import ArgumentSpec as ArgumentSpec
from ._calling import FunctionCalling as FunctionCalling
from ._docstrings import parse_docstring as parse_docstring
from ._registry import ActionManager as ActionManager
from ._registry import ToolLike as ToolLike
from ._runner import DEFAULT_TOOL_THREADS as DEFAULT_TOOL_THREADS
from ._runner import current_tool_limiter as current_tool_limiter
from ._runner import is_async_callable as is_async_callable
from ._runner import run_callable as run_callable
from ._runner import set_inline_warning as set_inline_warning
from ._schema import SCHEMA_FORMATS as SCHEMA_FORMATS
from ._schema import Parameter as Parameter
from ._schema import SchemaFormat as SchemaFormat
from ._schema import anthropic_schema as anthropic_schema
from ._schema import openai_schema as openai_schema
from ._schema import responses_schema as responses_schema
from ._schema import tool_schema as tool_schema
from ._schema import type_schema as type_schema
from ._schema_types import AnthropicInputSchema as AnthropicInputSchema
from ._schema_types import AnthropicToolSchema as AnthropicToolSchema
from ._schema_types import ChatFunctionDefinition as ChatFunctionDefinition
from ._schema_types import ChatToolSchema as ChatToolSchema
from ._schema_types import ResponsesToolSchema as ResponsesToolSchema
from ._tool import EFFECTS as EFFECTS
from ._tool import TOOL_NAME_PATTERN as TOOL_NAME_PATTERN
from ._tool import Effect as Effect
from ._tool import Tool as Tool
from ._validation import argument_converter as argument_converter
from ._validation import make_argument_converter as make_argument_converter

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "EFFECTS",
    "SCHEMA_FORMATS",
    "TOOL_NAME_PATTERN",
    "ActionManager",
    "AnthropicInputSchema",
    "AnthropicToolSchema",
    "ArgumentSpec",
    "ChatFunctionDefinition",
    "ChatToolSchema",
    "Effect",
    "FunctionCalling",
    "Parameter",
    "ResponsesToolSchema",
    "SchemaFormat",
    "Tool",
    "ToolLike",
    "anthropic_schema",
    "argument_converter",
    "current_tool_limiter",
    "is_async_callable",
    "make_argument_converter",
    "openai_schema",
    "parse_docstring",
    "responses_schema",
    "run_callable",
    "set_inline_warning",
    "tool_schema",
    "type_schema",
]

_publish(__name__, globals())
