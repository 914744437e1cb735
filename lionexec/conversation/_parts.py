"""Content parts: tool results that are more than text (images, files).

A tool may return, and the exports then render as each provider's own blocks:

* an :class:`ImagePart` or :class:`FilePart` (or a :class:`TextPart`);
* ``bytes`` of a PNG, JPEG, GIF or WebP image (an image) or of a PDF (a file);
* a list or tuple of those and strings (a string is a text part);
* the JSON form of a part, as a serialized history holds it: ``{"type": "text", "text"}``,
  ``{"type": "image", "media_type", "data"}`` or ``{"type": "file", "media_type", "data",
  "filename"}`` with base64 ``data``; and the image shapes of Anthropic (``{"type": "image",
  "source": {"type": "base64", ...}}``) and MCP (``{"type": "image", "data", "mimeType"}``);
* the content parts :func:`lionexec.mcp.mcp_output` records: ``{"type": "image" | "audio",
  "data", "mime_type"}`` (an image, an audio file), ``{"type": "file", "data", "mime_type",
  "uri"}`` (a file named after the last segment of its URI) and ``{"type": "text", "text",
  "uri"}`` (a text resource or resource link: text that names its URI).

Any other output is JSON, as before. :func:`content_parts` says which applies.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import attrs

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "TextPart",
    "content_parts",
    "parse_data_url",
    "part_json",
]


@attrs.frozen
class TextPart:
    """Text among other parts."""

    text: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen
class ImagePart:
    """An image: its bytes and media type (``image/png``, ``image/jpeg``, ...)."""

    data: bytes = attrs.field(converter=bytes, repr=lambda d: f"<{len(d)} bytes>")
    media_type: str = attrs.field(validator=attrs.validators.instance_of(str))

    @classmethod
    def from_bytes(cls, data: bytes) -> ImagePart:
        """An image part whose media type is read from *data*'s signature.

        Raises:
            ValueError: *data* is not a PNG, JPEG, GIF or WebP image.
        """
        media_type = sniff(data)
        if media_type is None or not media_type.startswith("image/"):
            raise ValueError("bytes are not a PNG, JPEG, GIF or WebP image")
        return cls(data, media_type)

    def data_url(self) -> str:
        return _data_url(self.media_type, self.data)


@attrs.frozen
class FilePart:
    """A file: its bytes, media type (``application/pdf``, ``text/plain``, ...) and name."""

    data: bytes = attrs.field(converter=bytes, repr=lambda d: f"<{len(d)} bytes>")
    media_type: str = attrs.field(validator=attrs.validators.instance_of(str))
    filename: str | None = None

    def data_url(self) -> str:
        return _data_url(self.media_type, self.data)


ContentPart: TypeAlias = TextPart | ImagePart | FilePart

_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def sniff(data: bytes) -> str | None:
    """The media type *data*'s signature names, among the ones the exports render."""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


_DATA_URL: Final = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def parse_data_url(url: object) -> tuple[str, bytes] | None:
    """The media type and bytes of a base64 ``data:`` URL (as :meth:`ImagePart.data_url`
    makes), or ``None`` for anything else."""
    match = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if match is None:
        return None
    data = _b64(match.group(2))
    return None if data is None else (match.group(1), data)


def content_parts(output: object) -> list[ContentPart] | None:
    """*output* as content parts, or ``None`` if it is an ordinary (JSON) output.

    A string alone, or a list of strings only, is ordinary text, not parts.
    """
    if isinstance(output, list | tuple):
        if not output:
            return None
        parts: list[ContentPart] = []
        rich = False  # a list of strings only is ordinary output
        for item in output:
            if isinstance(item, str):
                parts.append(TextPart(item))
                continue
            part = _one(item)
            if part is None:
                return None
            rich = True
            parts.append(part)
        return parts if rich else None
    part = _one(output)
    return None if part is None else [part]


def _one(value: object) -> ContentPart | None:
    if isinstance(value, TextPart | ImagePart | FilePart):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        media_type = sniff(data)
        if media_type is None:
            return None
        if media_type.startswith("image/"):
            return ImagePart(data, media_type)
        return FilePart(data, media_type)
    if type(value) is dict or isinstance(value, Mapping):
        return _from_json(value)
    return None


#: The keys besides ``type`` and ``text`` a text part may have: an MCP resource's.
_RESOURCE_KEYS: Final = frozenset({"uri", "mime_type", "mimeType"})


def _from_json(value: Mapping[Any, Any]) -> ContentPart | None:
    kind = value.get("type")
    if kind == "text":
        return _text_part(value)
    if kind == "image":
        source = value.get("source")
        if isinstance(source, Mapping) and source.get("type") == "base64":  # Anthropic
            media_type, data = source.get("media_type"), source.get("data")
        else:
            media_type, data = _media_type(value), value.get("data")
        decoded = _b64(data)
        if isinstance(media_type, str) and decoded is not None:
            return ImagePart(decoded, media_type)
        return None
    if kind in ("file", "audio"):  # audio: MCP AudioContent
        media_type, filename = _media_type(value), value.get("filename")
        decoded = _b64(value.get("data"))
        if isinstance(media_type, str) and decoded is not None:
            if not isinstance(filename, str):
                filename = _uri_name(value.get("uri"))
            return FilePart(decoded, media_type, filename)
    return None


def _text_part(value: Mapping[Any, Any]) -> TextPart | None:
    """A text part; an MCP resource's (with its ``uri``) names the URI in its text."""
    text, uri = value.get("text"), value.get("uri")
    extra = value.keys() - {"type", "text"}
    if not isinstance(text, str) or not extra <= _RESOURCE_KEYS:
        return None
    if not extra:
        return TextPart(text)
    if not isinstance(uri, str):
        return None
    return TextPart(text if uri in text else f"[resource {uri}]\n{text}")


def _media_type(value: Mapping[Any, Any]) -> object:
    """The media type of a part, under lionexec's key or MCP's (the wire's or the SDK's)."""
    for key in ("media_type", "mimeType", "mime_type"):
        if key in value:
            return value[key]
    return None


def _uri_name(uri: object) -> str | None:
    """The last segment of a resource's URI, as a file name (``None`` if there is none)."""
    if not isinstance(uri, str):
        return None
    return uri.rstrip("/").rsplit("/", 1)[-1] or None


def _b64(data: object) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def part_json(part: ContentPart) -> dict[str, Any]:
    """The JSON form of *part* (as a serialized history holds it)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    encoded = base64.b64encode(part.data).decode("ascii")
    if isinstance(part, ImagePart):
        return {"type": "image", "media_type": part.media_type, "data": encoded}
    return {
        "type": "file",
        "media_type": part.media_type,
        "data": encoded,
        "filename": part.filename,
    }
