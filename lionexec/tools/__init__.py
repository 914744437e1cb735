"""The tools layer: tool descriptors, their calls as events, and the registry (ADR-0012 D1, D6).

Imports only :mod:`lionexec.engine` and :mod:`lionexec.errors`.
"""

from .calling import FunctionCalling, Revalidator
from .docstrings import parse_docstring
from .registry import ActionManager, ToolLike
from .schema import Parameter, anthropic_schema, openai_schema, type_schema
from .tool import (
    DEFAULT_TOOL_THREADS,
    TOOL_NAME_PATTERN,
    Tool,
    current_tool_limiter,
    is_async_callable,
)
from .validation import argument_converter, make_argument_converter

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "TOOL_NAME_PATTERN",
    "ActionManager",
    "FunctionCalling",
    "Parameter",
    "Revalidator",
    "Tool",
    "ToolLike",
    "anthropic_schema",
    "argument_converter",
    "current_tool_limiter",
    "is_async_callable",
    "make_argument_converter",
    "openai_schema",
    "parse_docstring",
    "type_schema",
]
