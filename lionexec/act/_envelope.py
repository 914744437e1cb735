"""Reading tool calls, and whole assistant turns, out of the shapes models propose them in.

``Branch.act`` accepts what a provider SDK returns, as the SDK's own objects or as their plain
``dict`` forms (``model_dump()``); lionexec never imports an SDK, it reads them duck-typed:

========================================= =====================================================
passed to ``act()``                       read as
========================================= =====================================================
one tool call, or a list of them          a batch of calls; no assistant turn is recorded
an assistant message (a whole turn)       one assistant turn (text, reasoning) and its calls
========================================= =====================================================

A tool call is an :class:`~lionexec.conversation.ActionRequest`; an OpenAI Chat Completions
``tool_calls`` item (``ChatCompletionMessageFunctionToolCall``); an Anthropic ``tool_use``
block (``ToolUseBlock``); a Responses API ``function_call`` item
(``ResponseFunctionToolCall``); a mapping with ``function`` and ``arguments`` (and optionally
``call_id``); or an object with ``function`` and ``arguments`` attributes.

A whole turn is an OpenAI ``ChatCompletionMessage`` (or a ``ChatCompletion``: its first
choice), an Anthropic ``Message`` (or a mapping with ``role: "assistant"`` and a list of
content blocks), or a Responses API output (the ``Response``, or its ``output`` list, holding
``message``, ``reasoning`` and ``function_call`` items). Its text and its reasoning (Anthropic
``thinking``/``redacted_thinking`` blocks with their signatures, Responses ``reasoning`` items
with ``encrypted_content``) are kept verbatim in the recorded
:class:`~lionexec.conversation.AssistantResponse`, so exporting to the same API replays them.

Arguments are hostile input. They end the call ``invalid`` (a value the model can correct,
never an exception) when they are not a JSON object, not valid JSON, hold ``NaN`` or
``Infinity`` (JSON has neither), repeat a name within one object (JSON text whose readers
disagree on which value counts: a rule, a log and the tool must all see the same one), are
nested deeper than :data:`MAX_ARGUMENT_DEPTH`, or are a string longer than
:data:`MAX_ARGUMENT_CHARS`. The string the model sent is kept as it was
(``ActionRequest.raw_arguments``), so the export replays it exactly, malformed or not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Final, NoReturn

import attrs

from lionexec._jsonable import is_unicode, repeated_name, utf8_text
from lionexec._slots import builder
from lionexec._snapshot import atoms_only, snapshot
from lionexec.conversation import ActionRequest, AssistantResponse, new_call_id
from lionexec.errors import DuplicateCallError

__all__ = [
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_CALL_ID_CHARS",
    "Proposal",
    "ProposedBatch",
    "read_arguments",
    "read_batch",
    "read_proposal",
]

#: Arguments nested deeper than this (objects and arrays, the arguments object being level 1)
#: end the call ``invalid``.
MAX_ARGUMENT_DEPTH: Final = 64
#: An argument string longer than this many characters ends the call ``invalid``.
MAX_ARGUMENT_CHARS: Final = 1_000_000
#: A tool-call id longer than this many characters refuses the batch (providers' ids are under
#: 64; a journal indexes call ids, and a call's default idempotency key holds its id).
MAX_CALL_ID_CHARS: Final = 256
# Ints of at least this many bits may have more than 4,300 digits (Python will not print them).
_MAX_INT_BITS: Final = 14284
_SMALL_INT: Final = 1 << 64
_MINUS_SMALL_INT: Final = -_SMALL_INT  # (negated once, not per value)

_SHAPES = (
    "an ActionRequest, a mapping with 'function' and 'arguments', an OpenAI tool_calls item, "
    "a Responses API function_call item, an Anthropic tool_use block (or the SDK objects of "
    "those three), an object with 'function' and 'arguments' attributes, or a whole assistant "
    "message (OpenAI ChatCompletionMessage, Anthropic Message, Responses API output)"
)

#: The output item types of a Responses API turn.
_RESPONSES_ITEMS: Final = frozenset({"message", "reasoning", "function_call"})
#: The items that make a list one Responses API turn, not a batch of tool calls.
_TURN_ITEMS: Final = ("message", "reasoning")  # (a tuple: a hostile "type" may be unhashable)
# isinstance() tuples (``A | B`` would build a union object at every call)
_SEQUENCES: Final = (list, tuple)
_PLAIN: Final = (Mapping, ActionRequest)


@attrs.frozen
class Proposal:
    """One proposed tool call, read but not yet validated.

    ``arguments`` are the reader's own (a deep copy of what it was given, or what it parsed:
    nothing the caller holds), or ``None`` when they could not be read as a JSON object;
    ``problem`` then says why, and the call ends ``invalid``. ``raw_arguments`` is the
    argument string as the model sent it, if it sent a string. ``request`` is the request
    message to record: the caller's own :class:`ActionRequest`, or the one a whole assistant
    turn already names; ``None`` means "create one" (:meth:`to_request`).
    """

    function: str
    arguments: dict[str, Any] | None
    call_id: str
    problem: str | None = None
    request: ActionRequest | None = None
    raw_arguments: str | None = None

    def to_request(self, *, sender: str | None = None) -> ActionRequest:
        """The request message to record for this proposal.

        :attr:`request` when there is one; otherwise a new request carrying the call id and the
        raw argument string, sent by *sender* to the tool. Its arguments are a private deep
        copy: nothing done later to the proposal's values changes the record.
        """
        if self.request is not None:
            return self.request
        return self._new_request(snapshot(self.arguments) if self.arguments else {}, sender)

    def _new_request(self, arguments: dict[str, Any], sender: str | None) -> ActionRequest:
        """A new request for this proposal carrying *arguments* as given (the act layer
        passes the reader's own copy, which nothing else holds)."""
        # Trusted: _proposal checked the name, the id and the argument keys.
        return ActionRequest._proposed(
            self.function, arguments, self.call_id, self.raw_arguments, sender, self.function
        )


_build_proposal: Final = builder(
    Proposal, "function", "arguments", "call_id", "problem", "request", "raw_arguments"
)


@attrs.frozen
class ProposedBatch:
    """One ``act()`` batch, read but not yet validated or recorded.

    Attributes:
        turn: the assistant turn that proposed the calls, to be added to the history before
            the requests, or ``None`` when the caller passed bare tool calls. A turn is
            recorded even when it proposes no call (a final answer).
        proposals: the proposed calls, in the order proposed. The proposals of a turn carry
            their :attr:`Proposal.request`, which the turn's ``tool_calls`` names.
    """

    turn: AssistantResponse | None
    proposals: list[Proposal]


# Trusted builders for what the reader checked itself (see lionexec._slots): a proposal and
# a batch for each act(), without attrs' initializer (every act() builds them).
_build_batch: Final = builder(ProposedBatch, "turn", "proposals")


def read_batch(action_request: object, *, sender: str | None = None) -> ProposedBatch:
    """Read what was passed to ``act()`` into a :class:`ProposedBatch`.

    A list (or tuple) is a batch of tool calls, each read with :func:`read_proposal`, unless
    it is a Responses API output list (it holds a ``message`` or ``reasoning`` item): then it
    is one turn. An assistant message (see the module docs) is one turn with its calls.
    Anything else is one tool call. *sender* is the sender of the requests created for a turn
    (the branch's name). Nothing is recorded.

    Raises:
        ValueError: a tool call cannot be read; :class:`~lionexec.errors.DuplicateCallError`
            (a ValueError): two calls of the batch share a call id
            (the message names the id). Nothing has been recorded at that point.
    """
    proposal = read_plain_call(action_request)
    if proposal is not None:  # (no lists to build, no ids to compare)
        return _build_batch(None, [proposal])
    if type(action_request) is list or isinstance(action_request, _SEQUENCES):
        envelopes = [_plain(envelope) for envelope in action_request]
        for envelope in envelopes:
            if _item_type(envelope) in _TURN_ITEMS:
                return _responses_turn(envelopes, sender)
        proposals = [_read_plain(envelope) for envelope in envelopes]
        _check_unique_ids(proposals)
        return _build_batch(None, proposals)
    envelope = _plain(action_request)
    if type(envelope) is dict or isinstance(envelope, Mapping):
        if envelope.get("role") == "assistant":
            return _assistant_message(envelope, sender)
        kind = envelope.get("object")
        if kind == "response" and isinstance(envelope.get("output"), list):
            return _responses_turn([_plain(item) for item in envelope["output"]], sender)
        if kind == "chat.completion" and isinstance(envelope.get("choices"), list):
            choices = envelope["choices"]
            if len(choices) != 1:
                raise ValueError(
                    f"a ChatCompletion with {len(choices)} choices is not one turn; pass "
                    "the message of the choice to act on"
                )
            choice = _plain(choices[0])
            message = choice.get("message") if isinstance(choice, Mapping) else None
            if isinstance(message, Mapping):
                return _assistant_message(message, sender)
            raise ValueError(
                "the choice of a ChatCompletion must be a mapping holding a 'message' mapping, "
                f"got {_shown(choice)}"
            )
    return _build_batch(None, [_read_plain(envelope)])


def read_plain_call(action_request: object) -> Proposal | None:
    """The one tool call of *action_request* when it is a plain ``dict`` (or a list of one)
    that is no assistant turn, read as :func:`read_batch` reads it; ``None`` for anything
    else (then :func:`read_batch` reads it). The commonest ``act()`` (a server's one-call
    request), told apart without reading it into a batch.

    Raises:
        ValueError: as :func:`read_batch` (the dict is not a tool call it can read).
    """
    cls = type(action_request)
    if cls is list:
        if len(action_request) != 1:  # type: ignore[arg-type]
            return None
        envelope = action_request[0]  # type: ignore[index]
        if type(envelope) is dict and envelope.get("type") not in _TURN_ITEMS:
            return _read_plain(envelope)
        return None
    if (
        cls is dict
        and action_request.get("role") != "assistant"  # type: ignore[attr-defined]
        and action_request.get("object") not in _WHOLE_RESPONSES  # type: ignore[attr-defined]
    ):
        return _read_plain(action_request)
    return None


#: The ``object`` of a whole model response read as one turn (when it holds its list).
_WHOLE_RESPONSES: Final = ("response", "chat.completion")


def read_proposal(envelope: object) -> Proposal:
    """Read one tool call *envelope* into a :class:`Proposal` (see the module docs).

    Raises:
        ValueError: *envelope* is none of the accepted shapes; the message names the type
            received and the shapes accepted. Nothing has been recorded at that point.
    """
    return _read_plain(_plain(envelope))


def _read_plain(envelope: object) -> Proposal:
    """:func:`read_proposal` of an envelope :func:`_plain` has returned."""
    if isinstance(envelope, ActionRequest):
        content = envelope.content
        function, call_id = content.function, content.call_id
        raw: object = content.arguments
        if not raw and content.raw_arguments is not None:
            # Arguments that could not be read are stored as {} beside the text the model
            # sent: the text says what is wrong ("not valid JSON"), not the empty object.
            raw = content.raw_arguments
        return _proposal(function, raw, call_id, envelope, request=envelope)
    if type(envelope) is dict or isinstance(envelope, Mapping):
        kind = envelope.get("type")
        if kind == "function" and isinstance(envelope.get("function"), Mapping):
            spec = envelope["function"]  # OpenAI Chat Completions tool_calls item
            return _proposal(spec.get("name"), spec.get("arguments"), envelope.get("id"), envelope)
        if kind == "tool_use":  # Anthropic content block
            return _proposal(
                envelope.get("name"), envelope.get("input"), envelope.get("id"), envelope
            )
        if kind == "function_call":  # Responses API output item
            return _proposal(
                envelope.get("name"),
                envelope.get("arguments"),
                envelope.get("call_id"),
                envelope,
            )
        if "function" in envelope and "arguments" in envelope:
            return _proposal(
                envelope["function"], envelope["arguments"], envelope.get("call_id"), envelope
            )
        raise ValueError(
            f"cannot read a tool call from a mapping with keys {_keys(envelope)}; "
            f"expected {_SHAPES}"
        )
    if hasattr(envelope, "function") and hasattr(envelope, "arguments"):
        return _proposal(
            envelope.function,
            envelope.arguments,
            getattr(envelope, "call_id", None),
            envelope,
        )
    raise ValueError(f"cannot read a tool call from {type(envelope).__name__}; expected {_SHAPES}")


# -- SDK objects -------------------------------------------------------------------------------


def _plain(envelope: object) -> Any:
    """*envelope* as a plain mapping if it is a pydantic-style SDK object; else itself."""
    if type(envelope) is dict or isinstance(envelope, _PLAIN):
        return envelope
    dump = getattr(envelope, "model_dump", None)
    if callable(dump) and not isinstance(envelope, type):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    return envelope


def _item_type(envelope: object) -> object:
    if type(envelope) is dict or isinstance(envelope, Mapping):
        return envelope.get("type")
    return None


# -- whole turns -------------------------------------------------------------------------------


def _assistant_message(message: Mapping[str, Any], sender: str | None) -> ProposedBatch:
    content = message.get("content")
    if "tool_calls" in message or not isinstance(content, list):
        return _chat_turn(message, sender)
    blocks = [_plain(block) for block in content]
    if any(_item_type(b) in ("output_text", "refusal") for b in blocks):
        return _responses_turn([{**message, "content": blocks}], sender)
    return _anthropic_turn(blocks, sender)


def _chat_turn(message: Mapping[str, Any], sender: str | None) -> ProposedBatch:
    """An OpenAI Chat Completions assistant message: text and ``tool_calls``."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(
            p["text"] for p in map(_plain, content) if _item_type(p) == "text" and _is_text(p)
        )
    elif content is None:
        text = ""
    else:
        raise ValueError(f"an assistant message's content must be text, got {_shown(content)}")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list | tuple):
        raise ValueError(f"an assistant message's tool_calls must be a list, got {_shown(calls)}")
    proposals = [read_proposal(call) for call in calls]
    return _turn(text, proposals, "chat", (), sender)


def _anthropic_turn(blocks: list[Any], sender: str | None) -> ProposedBatch:
    """An Anthropic assistant message: content blocks, ``tool_use`` among them."""
    texts: list[str] = []
    proposals: list[Proposal] = []
    for block in blocks:
        kind = _item_type(block)
        if kind is None:
            raise ValueError(f"an Anthropic content block must be an object, got {_shown(block)}")
        if kind == "tool_use":
            proposals.append(read_proposal(block))
        elif kind == "text" and _is_text(block):
            texts.append(block["text"])
    return _turn("\n".join(texts), proposals, "anthropic", blocks, sender)


def _responses_turn(items: list[Any], sender: str | None) -> ProposedBatch:
    """A Responses API output list: ``message``, ``reasoning`` and ``function_call`` items."""
    texts: list[str] = []
    proposals: list[Proposal] = []
    for item in items:
        kind = _item_type(item)
        if kind is None:
            raise ValueError(f"a Responses API output item must be an object, got {_shown(item)}")
        if kind == "function_call":
            proposals.append(read_proposal(item))
        elif kind == "message":
            content = item.get("content")
            if content is not None and not isinstance(content, list | tuple):
                raise ValueError(
                    "a Responses API message item's content must be a list, "
                    f"got {type(content).__name__}"
                )
            for part in map(_plain, content or ()):
                if _item_type(part) == "output_text" and _is_text(part):
                    texts.append(part["text"])
    return _turn("\n".join(texts), proposals, "responses", items, sender)


def _is_text(block: Mapping[str, Any]) -> bool:
    return isinstance(block.get("text"), str)


def _turn(
    text: str,
    proposals: list[Proposal],
    api: str,
    blocks: Iterable[Mapping[str, Any]],
    sender: str | None,
) -> ProposedBatch:
    _check_unique_ids(proposals)
    proposals = [attrs.evolve(p, request=p.to_request(sender=sender)) for p in proposals]
    requests = [p.request for p in proposals if p.request is not None]
    turn = AssistantResponse(content=text, tool_calls=requests, api=api, blocks=blocks)
    return ProposedBatch(turn=turn, proposals=proposals)


def _check_unique_ids(proposals: list[Proposal]) -> None:
    if len(proposals) < 2:
        return
    seen: set[str] = set()
    for proposal in proposals:
        if proposal.call_id in seen:
            raise DuplicateCallError(
                f"tool call id {proposal.call_id!r} appears more than once in one batch; "
                "every call of a batch needs its own id",
                call_id=proposal.call_id,
            )
        seen.add(proposal.call_id)


# -- one call ----------------------------------------------------------------------------------


def _proposal(
    function: object,
    raw: object,
    call_id: object,
    envelope: object,
    *,
    request: ActionRequest | None = None,
) -> Proposal:
    if not isinstance(function, str) or not function:
        raise ValueError(
            f"a tool call needs a non-empty function name, got {_shown(function)} in "
            f"{type(envelope).__name__}"
        )
    if call_id is not None and not isinstance(call_id, str):
        raise ValueError(f"a tool call id must be a string, got {_shown(call_id)}")
    if not (str.isascii(function) or is_unicode(function)) or "\x00" in function:
        _refuse_text("function name", function)
    if call_id is not None:
        if not (str.isascii(call_id) or is_unicode(call_id)) or "\x00" in call_id:
            _refuse_text("call id", call_id)
        if len(call_id) > MAX_CALL_ID_CHARS:
            raise ValueError(
                f"a tool call id must be at most {MAX_CALL_ID_CHARS} characters, got one of "
                f"{len(call_id)}: {_shown(call_id)}"
            )
    arguments, problem = _read_arguments(raw)
    # kept to be replayed verbatim, so it must encode (a lone surrogate becomes U+FFFD)
    raw_arguments = utf8_text(raw) if isinstance(raw, str) else None
    if request is not None:
        raw_arguments = request.content.raw_arguments
    # every value checked above: built without attrs' initializer (one per proposed call)
    return _build_proposal(
        function, arguments, call_id or new_call_id(), problem, request, raw_arguments
    )


def _refuse_text(label: str, text: str) -> NoReturn:
    raise ValueError(
        f"a tool call's {label} must be valid Unicode without NUL characters (no lone "
        f"surrogates), got {_shown(text)}"
    )


class _Repeated(ValueError):
    """A JSON object's name appears twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object from *pairs*; raises :class:`_Repeated` if a name appears twice."""
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        name = repeated_name(pairs)
        raise _Repeated(f"arguments repeat the name {_shown(name)} within one object")
    return mapping


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_arguments(raw: object) -> tuple[dict[str, Any] | None, str | None]:
    """A call's *raw* arguments as :meth:`Branch.act <lionexec.act.Branch.act>` reads them:
    ``(arguments, None)``, or ``(None, why)`` for arguments that make the call ``invalid``
    (see the module docs). Never raises."""
    return _read_arguments(raw)


def _read_arguments(raw: object) -> tuple[dict[str, Any] | None, str | None]:
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if len(raw) > MAX_ARGUMENT_CHARS:
            return None, (
                f"arguments are {len(raw)} characters long; the limit is {MAX_ARGUMENT_CHARS}"
            )
        if not raw.strip():
            return {}, None
        try:
            parsed = json.loads(raw, parse_constant=_refuse_constant, object_pairs_hook=_unique)
        except RecursionError:
            return None, f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
        except _Repeated as exc:
            return None, str(exc)
        except json.JSONDecodeError as exc:
            return None, (
                f"arguments are not valid JSON: {exc.msg} at line {exc.lineno} "
                f"column {exc.colno} (char {exc.pos})"
            )
        except ValueError as exc:  # NaN/Infinity, an int too long to read
            return None, f"arguments are not valid JSON: {exc}"
        if type(parsed) is dict:  # JSON makes new values: nobody else holds them
            problem = None if _flat(parsed) else _hostile(parsed)
            return (None, problem) if problem is not None else (parsed, None)
        raw = parsed
    if type(raw) is dict and _flat(raw):  # the usual arguments: one pass, a shallow copy
        return raw.copy(), None
    if type(raw) is dict or isinstance(raw, Mapping):
        try:
            problem = _hostile(raw)  # (its names too: non-strings are refused at every level)
            if problem is not None:
                return None, problem
            arguments = dict(raw)
            return (arguments if atoms_only(arguments) else snapshot(arguments)), None
        except Exception as exc:  # a mapping (this one or one inside) that cannot be read
            return None, _unreadable(raw, exc)
    if attrs.has(type(raw)):
        try:
            fields: dict[str, Any] = attrs.asdict(raw)  # type: ignore[arg-type]
        except RecursionError:  # asdict recurses: a cycle, or nesting past the stack
            return None, f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
        except Exception as exc:
            return None, _unreadable(raw, exc)
        problem = _hostile(fields)  # held to the same rules as a mapping's
        return (None, problem) if problem is not None else (fields, None)
    return None, f"arguments must be a JSON object, got {type(raw).__name__}"


def _unreadable(raw: object, exc: Exception) -> str:
    """Why arguments whose reading raised *exc* make the call ``invalid``."""
    return f"arguments could not be read from {type(raw).__name__}: {_shown(exc, 200)}"


def _hostile(arguments: Mapping[str, Any]) -> str | None:
    """Why *arguments* cannot be accepted (not JSON data, too deep, too long), or ``None``.

    Iterative, so no nesting depth can raise :class:`RecursionError`. A container is walked
    once: one met again is checked by the height it was found to have, so shared containers
    cost nothing more, and a container inside itself (a cycle) is refused. (Arguments
    that are :func:`_flat` need no walk.)
    """
    too_deep = f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
    path: set[int] = set()  # the containers being walked: meeting one again is a cycle
    heights: dict[int, int] = {}  # walked containers: how many levels they span
    stack: list[tuple[Any, int, bool]] = [(arguments, 1, False)]
    while stack:
        value, depth, leaving = stack.pop()
        if leaving:
            path.discard(id(value))
            heights[id(value)] = 1 + max(
                (heights.get(id(item), 0) for item in _items(value)), default=0
            )
            continue
        cls = type(value)
        if cls is str or isinstance(value, str):
            if is_unicode(value):
                continue
            return _NOT_UNICODE
        if cls is bool or value is None:
            continue
        if cls is float or isinstance(value, float):
            if not math.isfinite(value):
                return "arguments hold a non-finite number (NaN or Infinity), which JSON has not"
            continue
        if cls is int or isinstance(value, int):
            if value.bit_length() >= _MAX_INT_BITS:
                return "arguments hold an integer too long to print (over 4,300 digits)"
            continue
        if cls is dict or cls is list or isinstance(value, _CONTAINERS):
            key = id(value)
            if key in path:
                return "arguments contain themselves (a cycle), which JSON cannot"
            if depth + heights.get(key, 1) - 1 > MAX_ARGUMENT_DEPTH:
                return too_deep
            if key in heights:
                continue
            if isinstance(value, Mapping):
                for name in value:
                    if not isinstance(name, str):
                        return f"argument names must be strings, got {_shown(name)}"
                    if not is_unicode(name):
                        return _NOT_UNICODE
            path.add(key)
            stack.append((value, depth, True))
            stack.extend((item, depth + 1, False) for item in _items(value))
    return None


def _flat(arguments: dict[Any, Any]) -> bool:
    """Whether *arguments* is flat, plain JSON: names that are valid Unicode strings, values
    that are JSON scalars (valid Unicode strings, booleans, ``null``, integers below 2**64,
    finite floats). Nothing in such a dict can be hostile, or be changed through it; one
    pass over the usual arguments instead of three, for every proposed call."""
    for key, value in arguments.items():
        if type(key) is not str or not (key.isascii() or is_unicode(key)):
            return False
        cls = type(value)
        if cls is str:
            if value.isascii() or is_unicode(value):
                continue
            return False
        if cls is int:  # (not a bool: an exact type)
            if _MINUS_SMALL_INT < value < _SMALL_INT:
                continue
            return False
        if cls is bool or value is None:
            continue
        if cls is float and math.isfinite(value):
            continue
        return False
    return True


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to *limit* characters, for an error message; never raises (a
    hostile object's ``__repr__`` may, or recurse too deeply)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} whose repr failed>"
    return text[:limit]


def _keys(mapping: Mapping[Any, Any], shown: int = 20) -> str:
    """The first *shown* keys of *mapping*, sorted, for an error message; never raises."""
    names = sorted(key if type(key) is str else _shown(key) for key in islice(mapping, shown))
    more = len(mapping) - len(names)
    return f"{names}" + (f" and {more} more" if more > 0 else "")


_NOT_UNICODE: Final = (
    "arguments hold a string that is not valid Unicode (a lone surrogate), which cannot be "
    "stored or exported as UTF-8"
)


#: What _hostile walks into (a set's members are checked as a list's are).
_CONTAINERS: Final = (Mapping, list, tuple, set, frozenset)


def _items(container: Any) -> Iterable[Any]:
    if type(container) is dict or isinstance(container, Mapping):
        return container.values()
    if isinstance(container, list | tuple | set | frozenset):
        return container
    return ()
