"""The tool shapes each provider SDK's ``tools=`` takes, as TypedDicts mirroring the SDKs' own
(``openai.types.chat.ChatCompletionFunctionToolParam``,
``openai.types.responses.FunctionToolParam``, ``anthropic.types.ToolParam``), so that
``registry.schemas(api)`` passes to ``client.chat.completions.create(tools=...)``,
``client.responses.create(tools=...)`` and ``client.messages.create(tools=...)`` under
``mypy --strict`` without a cast. No SDK is imported: TypedDicts are structural, and a type
checker compares these with the SDKs' key for key (so every key the SDK declares is declared
here, with the same type, whether lionexec sets it or not). The test suite type-checks a
program passing them to the installed SDKs.
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import (
    Literal,
    Protocol,
    Required,
    SupportsIndex,
    TypeAlias,
    TypedDict,
    TypeVar,
    overload,
)

__all__ = [
    "AnthropicInputSchema",
    "AnthropicToolSchema",
    "ChatFunctionDefinition",
    "ChatToolSchema",
    "ResponsesToolSchema",
]

_T_co = TypeVar("_T_co", covariant=True)


class _SequenceNotStr(Protocol[_T_co]):
    """A sequence that is not a ``str`` (the SDKs' own protocol for lists of names)."""

    @overload
    def __getitem__(self, index: SupportsIndex, /) -> _T_co: ...
    @overload
    def __getitem__(self, index: slice, /) -> Sequence[_T_co]: ...
    def __contains__(self, value: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[_T_co]: ...
    def __reversed__(self) -> Iterator[_T_co]: ...


class ChatFunctionDefinition(TypedDict, total=False):
    """The ``function`` of a Chat Completions function tool (the SDK's ``FunctionDefinition``)."""

    name: Required[str]
    description: str
    parameters: dict[str, object]
    strict: bool | None


class ChatToolSchema(TypedDict, total=False):
    """A Chat Completions function tool (``schemas("openai")``); the SDK's
    ``ChatCompletionFunctionToolParam``."""

    function: Required[ChatFunctionDefinition]
    type: Required[Literal["function"]]


_Reserved = TypedDict("_Reserved", {"async": bool}, total=False)


class ResponsesToolSchema(_Reserved, total=False):
    """A Responses API function tool (``schemas("responses")``); the SDK's
    ``FunctionToolParam``: ``strict`` is always stated."""

    name: Required[str]
    parameters: Required[dict[str, object] | None]
    strict: Required[bool | None]
    type: Required[Literal["function"]]
    allowed_callers: list[Literal["direct", "programmatic"]] | None
    defer_loading: bool
    description: str | None
    output_schema: dict[str, object] | None


class AnthropicInputSchema(TypedDict, total=False):
    """The typed form of an Anthropic tool's ``input_schema`` (the SDK's
    ``InputSchemaTyped``)."""

    type: Required[Literal["object"]]
    properties: dict[str, object] | None
    required: _SequenceNotStr[str] | None


class _CacheControl(TypedDict, total=False):
    type: Required[Literal["ephemeral"]]
    ttl: Literal["5m", "1h"]


_AllowedCaller: TypeAlias = Literal[
    "direct", "code_execution_20250825", "code_execution_20260120", "code_execution_20260521"
]


class AnthropicToolSchema(TypedDict, total=False):
    """An Anthropic Messages tool (``schemas("anthropic")``); the SDK's ``ToolParam``."""

    input_schema: Required[AnthropicInputSchema | dict[str, object]]
    name: Required[str]
    allowed_callers: list[_AllowedCaller]
    cache_control: _CacheControl | None
    defer_loading: bool
    description: str
    eager_input_streaming: bool | None
    input_examples: Iterable[dict[str, object]]
    strict: bool
    type: Literal["custom"] | None
