"""cattrs hooks for the conversation layer.

Registered by :func:`lionexec.serialization.make_converter`.

A message serializes as its fields plus ``"kind"`` (which class it is: the messages are a
cattrs tagged union) and ``"role"`` (for readers; it follows from the kind). Arguments and
outputs are rendered as strict JSON (:func:`lionexec._jsonable.jsonable`: ``json.dumps(...,
allow_nan=False)`` always succeeds; non-finite floats and unprintable ints become strings), so
any value can be saved; values that are already JSON data load back equal. Content parts
(images, files) are saved in their JSON form (:func:`~lionexec.conversation._parts.part_json`)
and exported as parts again after loading. A history serializes as ``{"messages": [...]}``
and loads back through its constructor, which checks every link.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter
from cattrs.strategies import configure_tagged_union

from .._jsonable import jsonable as strict_json
from ._history import MessageManager
from ._messages import (
    ActionRequest,
    ActionRequestContent,
    ActionResponse,
    ActionResponseContent,
    AssistantResponse,
    Instruction,
    Message,
    System,
)
from ._parts import ContentPart, content_parts, part_json

_MESSAGE_CLASSES: tuple[type[Message], ...] = (
    System,
    Instruction,
    AssistantResponse,
    ActionRequest,
    ActionResponse,
)
_BY_KIND: dict[str, type[Message]] = {cls.kind: cls for cls in _MESSAGE_CLASSES}
_AnyMessage = Union[System, Instruction, AssistantResponse, ActionRequest, ActionResponse]  # noqa: UP007


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*."""
    as_json = override(unstruct_hook=strict_json)
    converter.register_unstructure_hook(
        ActionRequestContent,
        make_dict_unstructure_fn(ActionRequestContent, converter, arguments=as_json),
    )
    converter.register_unstructure_hook(
        ActionResponseContent,
        make_dict_unstructure_fn(
            ActionResponseContent,
            converter,
            arguments=as_json,
            output=override(unstruct_hook=_output_json),
        ),
    )
    for content in (ActionRequestContent, ActionResponseContent):  # a name it lacks: refused
        converter.register_structure_hook(
            content, make_dict_structure_fn(content, converter, _cattrs_forbid_extra_keys=True)
        )
    structurers: dict[str, Callable[[Any, Any], Message]] = {}
    for cls in _MESSAGE_CLASSES:
        converter.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, converter))
        structurers[cls.kind] = make_dict_structure_fn(
            cls, converter, _cattrs_forbid_extra_keys=True
        )
    configure_tagged_union(_AnyMessage, converter, tag_generator=_kind, tag_name="kind")
    tagged = converter.get_unstructure_hook(_AnyMessage)
    for cls in _MESSAGE_CLASSES:
        converter.register_unstructure_hook(cls, _with_role(tagged, cls))

    def structure_message(data: Any, cls: type[Message]) -> Message:
        if not isinstance(data, dict):
            raise TypeError(f"a message is a JSON object, not {type(data).__name__}")
        fields = dict(data)
        kind = fields.pop("kind", None)
        role = fields.pop("role", None)
        target = _BY_KIND.get(kind) if isinstance(kind, str) else None
        if target is None:
            raise ValueError(f"unknown message kind {kind!r}; expected one of {sorted(_BY_KIND)}")
        if not issubclass(target, cls):
            raise TypeError(f"a {kind!r} message cannot be loaded as {cls.__name__}")
        if role is not None and role != target.role.value:
            raise ValueError(
                f"a {kind!r} message has the role {target.role.value!r}, not {role!r}"
            )
        return structurers[kind](fields, target)

    converter.register_structure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, Message), structure_message
    )

    def unstructure_history(history: MessageManager) -> dict[str, Any]:
        return {"messages": [converter.unstructure(m) for m in history]}

    def structure_history(data: Any, _: type[MessageManager]) -> MessageManager:
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise TypeError('a history is a JSON object {"messages": [...]}')
        return MessageManager(converter.structure(m, Message) for m in data["messages"])

    converter.register_unstructure_hook(MessageManager, unstructure_history)
    converter.register_structure_hook(MessageManager, structure_history)


def _output_json(output: Any) -> Any:
    """A tool's output as strict JSON; content parts (images, files) in their JSON form,
    except those already in a JSON form (a mapping: an MCP or Anthropic image, say), which
    are kept as they are, so that a saved history loads with the output it recorded."""
    if type(output) is not str:
        parts = content_parts(output)
        if parts is not None:
            if isinstance(output, list | tuple):
                return [_part_json(item, part) for item, part in zip(output, parts, strict=True)]
            return _part_json(output, parts[0])
    return strict_json(output)


def _part_json(item: object, part: ContentPart) -> Any:
    # a part's text and file name may hold a lone surrogate (a file name from os.listdir)
    return strict_json(item if isinstance(item, Mapping) else part_json(part))


def _kind(cls: type) -> str:
    kind: str = cls.kind  # type: ignore[attr-defined]  # the union's members are messages
    return kind


def _with_role(
    tagged: Callable[[Any], dict[str, Any]], cls: type[Message]
) -> Callable[[Message], dict[str, Any]]:
    role = cls.role.value

    def unstructure(message: Message) -> dict[str, Any]:
        record = tagged(message)
        record["role"] = role
        return record

    return unstructure
