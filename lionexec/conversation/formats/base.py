"""The provider-format contract, the format names, and the plan the three exports share.

**Names.** lionexec speaks three provider APIs, each under one canonical name
(:data:`FORMAT_NAMES`): ``"chat"`` (OpenAI Chat Completions), ``"responses"`` (OpenAI
Responses) and ``"anthropic"`` (Anthropic Messages). :func:`resolve_format` reads a name:
an old spelling (:data:`FORMAT_ALIASES`: ``"openai"``, the tool-schema name of Chat
Completions) still resolves, with a ``DeprecationWarning`` naming the canonical one; any
other name is a :class:`~lionexec.errors.ConfigurationError` listing the valid ones.

**The plan.** The three exports follow one plan, so they agree on what the model is shown:

* Each assistant turn is one turn: an :class:`AssistantResponse` with the calls it proposed,
  or, for requests no assistant turn claims, one turn per batch (a run of requests not
  interrupted by any other message, as ``Branch.act`` records a batch). Two ``act()`` batches
  one after the other are never merged into one turn. Two run at once on one branch are
  when the second's requests were recorded right after the first's (before any of its
  responses): the history does not say where one ended, and one turn proposing both
  batches' calls is valid for every provider.
* Each call's result comes right after its turn, in the order of the calls, even if the
  response was recorded later: every provider requires it.
* Every request yields exactly one call and exactly one result. A request with no recorded
  response gets an error result saying so; it is never dropped.
* A call's arguments are replayed as the model sent them: the raw argument string when there
  is one (Chat Completions and Responses, even a malformed one), else the arguments as JSON.
  Anthropic's ``tool_use.input`` is an object, so a malformed string is sent as ``{}`` there.
* A turn recorded from a provider's own message (``AssistantResponse.api``) is replayed
  verbatim to that same API: Anthropic ``thinking`` and ``redacted_thinking`` blocks with their
  signatures, Responses ``reasoning`` items with their ``encrypted_content`` and output
  message ids. Other APIs get its text and calls (reasoning is specific to its provider).
  Blocks of other kinds (Anthropic server-tool blocks, Responses items other than
  ``reasoning``, ``message`` and ``function_call``) stay in the record but are not replayed;
  text blocks are replayed without their citations.
* A completed call's result is its output: a string as it is, content parts
  (:mod:`lionexec.conversation._parts`: images, files) as the provider's own blocks, anything
  else as JSON (so ``None`` is ``null``). A call that did not complete gets
  ``{"error": <type>, "message": <text>, "outcome": <outcome>}`` and, for Anthropic,
  ``is_error: true``.
* Chat Completions ``tool`` messages hold text only. An image or file a tool returned is
  named in the tool message (``[image/png image: attached below]``) and sent in one ``user``
  message after the turn's tool messages (``image_url`` and ``file`` parts, as data URLs).
* Anthropic accepts tool-use ids of letters, digits, ``_`` and ``-`` only: another call id
  (``functions.add:0``, as some OpenAI-compatible models send) is exported there as
  :func:`~lionexec.conversation.formats.anthropic_tool_id` maps it, the same in
  ``tool_use.id`` and ``tool_result.tool_use_id``. Anthropic also refuses text blocks of
  whitespace only: they are left out like empty ones.
* Everything is strict JSON (``json.dumps(..., allow_nan=False)`` succeeds) and valid
  UTF-8 (a lone surrogate in a recorded string becomes U+FFFD): a non-finite
  float in an output becomes ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, an int too long to
  print becomes a ``"<int with N bits>"`` string, cycles and nesting past the depth cap become
  markers.

The return types name the SDKs' own request types (``ChatCompletionMessageParam``,
``anthropic.types.MessageParam``, ``ResponseInputItemParam``) for type checkers when the SDK
is installed (``Any`` otherwise); at run time they are plain dicts and lists, and lionexec
never imports an SDK.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from ..._jsonable import is_flat_json, json_encoder, utf8_text
from ..._jsonable import jsonable as strict_json
from ...errors import ConfigurationError
from .._messages import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    Message,
    System,
)
from .._parts import ContentPart, FilePart, ImagePart, TextPart, content_parts

if TYPE_CHECKING:
    from ...tools import SchemaFormat

__all__ = [
    "FORMAT_ALIASES",
    "FORMAT_NAMES",
    "NO_RESPONSE",
    "FormatName",
    "ProviderFormat",
    "ProviderTurn",
    "dumps",
    "part_text",
    "resolve_format",
    "result_text",
]

# -- the names ---------------------------------------------------------------------------------

#: The canonical name of a provider API: ``"chat"`` (OpenAI Chat Completions),
#: ``"responses"`` (OpenAI Responses) or ``"anthropic"`` (Anthropic Messages).
FormatName: TypeAlias = Literal["chat", "responses", "anthropic"]
#: Every canonical format name, in this order.
FORMAT_NAMES: Final[tuple[FormatName, ...]] = ("chat", "responses", "anthropic")
#: Deprecated spellings still read, and the canonical name each stands for.
FORMAT_ALIASES: Final[Mapping[str, FormatName]] = MappingProxyType({"openai": "chat"})


def resolve_format(name: str) -> FormatName:
    """The canonical name for *name*: one of :data:`FORMAT_NAMES`.

    A canonical name is returned as it is. A deprecated alias (:data:`FORMAT_ALIASES`, such as
    ``"openai"``) returns the name it stands for and warns (``DeprecationWarning``) naming it.

    Raises:
        ConfigurationError: *name* is neither (the message lists the valid names).
    """
    return _canonical(name, 3)


_CANONICAL: Final[Mapping[str, FormatName]] = MappingProxyType({n: n for n in FORMAT_NAMES})


def _canonical(name: object, stacklevel: int) -> FormatName:
    """:func:`resolve_format`, warning *stacklevel* frames up (2: the caller of this)."""
    if not isinstance(name, str):
        alias = None
    elif name in _CANONICAL:
        return _CANONICAL[name]
    else:
        alias = FORMAT_ALIASES.get(name)
    if alias is None:
        valid = ", ".join(repr(n) for n in FORMAT_NAMES)
        aliases = ", ".join(repr(a) for a in FORMAT_ALIASES)
        raise ConfigurationError(
            f"unknown provider format {name!r}: expected one of {valid} "
            f"(deprecated aliases: {aliases})"
        )
    warnings.warn(
        f"the provider format name {name!r} is deprecated; use {alias!r}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return alias


# -- the contract ------------------------------------------------------------------------------


@attrs.frozen
class ProviderTurn:
    """One assistant turn as a provider sent it, read by :meth:`ProviderFormat.read_turn`.

    Attributes:
        api: the name of the format it was read with.
        text: the turn's text (Chat Completions: its content; Anthropic text blocks and
            Responses ``output_text`` parts joined by newlines).
        calls: the tool calls it proposed, as the provider's own items (Chat Completions
            ``tool_calls`` items, Anthropic ``tool_use`` blocks, Responses ``function_call``
            items), in order and unread: arguments are hostile input, read by
            :func:`lionexec.act.read_proposal`.
        blocks: what the record keeps verbatim (:attr:`AssistantResponse.blocks`): Anthropic
            content blocks or Responses output items, in order; empty for Chat Completions.
    """

    api: FormatName
    text: str
    calls: tuple[Any, ...] = ()
    blocks: tuple[Mapping[str, Any], ...] = ()

    def message(
        self,
        requests: Iterable[ActionRequest | uuid.UUID] = (),
        *,
        sender: str | None = None,
        recipient: str | None = None,
    ) -> AssistantResponse:
        """The turn as the :class:`AssistantResponse` to record, naming *requests* (the
        requests recorded for :attr:`calls`, or their ids, in order)."""
        return AssistantResponse(
            content=self.text,
            tool_calls=requests,
            api=self.api,
            blocks=self.blocks,
            sender=sender,
            recipient=recipient,
        )


@runtime_checkable
class ProviderFormat(Protocol):
    """The conversation side of one provider API: reading its turns, exporting a history.

    lionexec registers one object per API (:func:`~lionexec.conversation.provider_format`
    returns it by name); code that depends on the API asks that object rather than comparing
    names. The model-call side (request bodies, response and stream parsing) is
    :class:`lionexec.models.ModelFormat`, which builds on this one.

    **Contract.** Every method is synchronous and pure: it reads its arguments, returns new
    plain data (dicts, lists, strings, records) and keeps no state, so it may be called from
    any thread, at any time, concurrently. Nothing blocks and nothing is I/O; there is no
    checkpoint, so cancellation never interrupts one midway. Nothing passed in is changed or
    kept.

    **Errors.** :meth:`read_turn` raises ``ValueError`` when the message is not a turn of this
    API's shape (the message says what was found); nothing has been recorded then. The
    exports never raise for a history the :class:`~lionexec.conversation.MessageManager`
    accepted: whatever a tool returned or a model sent is rendered as strict JSON and valid
    UTF-8, never dropped (see :mod:`lionexec.conversation.formats.base` for the plan they
    share).
    """

    @property
    def name(self) -> FormatName:
        """The canonical name (one of :data:`FORMAT_NAMES`)."""
        ...

    @property
    def tool_schema(self) -> SchemaFormat:
        """The name of this API's tool-schema shape, for
        :meth:`lionexec.tools.ActionManager.schemas` and :meth:`lionexec.tools.Tool.schema_for`
        (``"openai"`` for Chat Completions: the tools layer names that shape so)."""
        ...

    def read_turn(self, message: Any) -> ProviderTurn:
        """The assistant turn *message* (the plain JSON form of what the provider returned:
        an SDK object's ``model_dump()``): its text, its tool calls and the blocks to keep.

        Raises:
            ValueError: *message* is not a turn of this API.
        """
        ...

    def export(self, history: Iterable[Message]) -> Any:
        """*history* as this API's request type (Chat Completions ``messages``, Responses
        ``input``, Anthropic ``messages`` and ``system``)."""
        ...

    def request_fields(self, history: Iterable[Message]) -> dict[str, Any]:
        """*history* as the fields of a request body: :meth:`export` under the key(s) this
        API reads it from (``{"messages": ...}``, ``{"input": ...}``, ``{"messages": ...,
        "system": ...}``)."""
        ...


# -- what the exports share --------------------------------------------------------------------

#: The error type of the result exported for a request that has no recorded response.
NO_RESPONSE = "NoResponseRecorded"

#: The image types both OpenAI APIs take as image parts (Anthropic takes the same).
_OPENAI_IMAGES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@attrs.frozen
class _Text:
    """A plan item: one message of text (``"system"``, ``"user"`` or ``"assistant"``)."""

    role: str  # "system" | "user" | "assistant"
    text: str


@attrs.frozen
class _ToolTurn:
    """A plan item: an assistant turn (``None``: a bare batch), its calls and their results
    (``None``: no recorded response)."""

    turn: AssistantResponse | None
    text: str
    calls: tuple[ActionRequest, ...]
    results: tuple[ActionResponse | None, ...]


@attrs.frozen
class _Result:
    """What a model is shown for one call's result."""

    text: str  # the result as text (parts: their text, attachments named)
    parts: list[ContentPart] | None
    is_error: bool


def _typed(value: Any) -> Any:
    """The exports build plain JSON; their declared types are the SDKs' request types.

    Every string is made valid Unicode (:func:`_utf8`) on the way out.
    """
    return _utf8(value)


def _utf8(value: Any) -> Any:
    """*value*, plain JSON, with each string that holds a lone surrogate made valid Unicode
    (each lone half becomes U+FFFD). The SDKs send a request as UTF-8 (httpx encodes JSON
    with ``ensure_ascii=False``), which one such string would make fail: a tool's text
    output, a turn's text or a replayed argument string may hold one, as sent."""
    if isinstance(value, str):
        return utf8_text(value)
    if type(value) is dict:
        return {_utf8(key): _utf8(item) for key, item in value.items()}
    if type(value) is list:
        return [_utf8(item) for item in value]
    return value


def result_text(response: ActionResponse | None) -> tuple[str, bool]:
    """The text a model is shown for *response*, and whether it is an error.

    ``None`` stands for a request that has no recorded response. Content parts are rendered
    as their text, with each image or file named.
    """
    if response is not None and response.content.success:  # (without building a _Result)
        text = _plain_text(response.content.output)
        if text is not None:
            return text, False
    result = _result(response)
    return result.text, result.is_error


def _plain_text(output: object) -> str | None:
    """The text of a successful *output* shown as it is: a string, or a flat dict's strict
    JSON (its own rendering, encoded as it is; a content part has a ``"type"``). ``None``
    for any other output."""
    if isinstance(output, str):
        return output
    if type(output) is dict and "type" not in output and is_flat_json(output):
        return _json_text(output)
    return None


def _result(response: ActionResponse | None) -> _Result:
    """What a model is shown for *response* (``None``: a request with no recorded response)."""
    if response is None:
        record = {"error": NO_RESPONSE, "message": "no response was recorded for this call"}
        return _Result(dumps(record), None, True)
    content = response.content
    if content.success:
        output = content.output
        text = _plain_text(output)
        if text is not None:
            return _Result(text, None, False)
        parts = content_parts(output)
        if parts is not None:
            return _Result(_parts_text(parts), parts, False)
        converted = strict_json(output)
        if isinstance(converted, str):  # a value JSON has no scalar for (NaN, a huge int,
            # bytes, ...): its text as it is, which is what a journal keeps and reloads
            return _Result(converted, None, False)
        return _Result(_json_text(converted), None, False)
    error = content.error
    record = {
        "error": error.type if error is not None else "UnknownError",
        "message": error.message if error is not None else "",
        "outcome": content.outcome.value,
    }
    return _Result(dumps(record), None, True)


def _parts_text(parts: list[ContentPart]) -> str:
    return "\n".join(part_text(part) for part in parts)


def part_text(part: ContentPart, note: str = "attached below") -> str:
    """*part* as text: a text part's text; an image or file named, with *note*."""
    if isinstance(part, TextPart):
        return part.text
    kind = "image" if isinstance(part, ImagePart) else "file"
    name = f" {part.filename}" if isinstance(part, FilePart) and part.filename else ""
    return f"[{part.media_type} {kind}{name}: {note}]"


# -- the plan ----------------------------------------------------------------------------------


def _plan(history: Iterable[Message]) -> list[_Text | _ToolTurn]:
    """*history* as the exports present it: text messages and tool turns, in order (see the
    module docs)."""
    messages = list(history)
    by_id = {m.id: m for m in messages}
    answers = {
        m.content.action_request_id: m
        for m in messages
        if isinstance(m, ActionResponse) and m.content.action_request_id is not None
    }
    owner: dict[uuid.UUID, uuid.UUID] = {}  # request id -> the assistant turn that proposed it
    for m in messages:
        if isinstance(m, AssistantResponse):
            for request_id in m.tool_calls:
                if isinstance(by_id.get(request_id), ActionRequest):
                    owner.setdefault(request_id, m.id)

    def tool_turn(turn: AssistantResponse | None, calls: list[ActionRequest]) -> _ToolTurn:
        text = turn.content if turn is not None else ""
        return _ToolTurn(turn, text, tuple(calls), tuple(answers.get(c.id) for c in calls))

    plan: list[_Text | _ToolTurn] = []
    run: list[ActionRequest] = []  # unclaimed requests of one batch, waiting to become a turn
    for m in messages:
        if isinstance(m, ActionRequest) and m.id not in owner:
            run.append(m)
            continue
        if run:  # any other message ends the batch: act() adds a batch's requests together
            plan.append(tool_turn(None, run))
            run = []
        if isinstance(m, ActionRequest | ActionResponse):
            continue  # placed with its turn
        if isinstance(m, System):
            plan.append(_Text("system", m.content))
        elif isinstance(m, Instruction):
            plan.append(_Text("user", m.content))
        elif isinstance(m, AssistantResponse):
            calls: list[ActionRequest] = []
            for request_id in dict.fromkeys(m.tool_calls):
                request = by_id.get(request_id)
                if isinstance(request, ActionRequest) and owner[request_id] == m.id:
                    calls.append(request)
            plan.append(tool_turn(m, calls))
    if run:
        plan.append(tool_turn(None, run))
    return plan


def _arguments_string(call: ActionRequest) -> str:
    """The call's arguments as a string: the raw string the model sent, else JSON."""
    raw = call.content.raw_arguments
    return raw if raw is not None else dumps(call.content.arguments)


def _verbatim_blocks(item: _ToolTurn, api: FormatName) -> list[dict[str, Any]] | None:
    """The blocks of *item*'s turn if it was recorded from *api* (else ``None``)."""
    turn = item.turn
    if turn is None or turn.api != api or not turn.blocks:
        return None
    return [dict(block) for block in turn.blocks]


def dumps(value: object) -> str:
    """Strict JSON text of *value* (see :func:`lionexec._jsonable.jsonable`), non-ASCII kept."""
    return _json_text(strict_json(value))


#: :func:`dumps` of a value :func:`~lionexec._jsonable.jsonable` has converted already (which
#: holds no cycle): ``json.dumps(converted, ensure_ascii=False, allow_nan=False)``'s text, with
#: the encoder built once: a tool message's text is rendered per call, on every export.
_json_text: Final = json_encoder(separators=(", ", ": "))
