"""A ``tools/call`` result as what the model reads: text parts joined, structured content as JSON text, images and
resources as short notes (an image's data goes to the notebook, never into the text)."""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..record.images import encoded_size
from ..secrets import redact_text

RESOURCE_TEXT_CHARS = 2000
"""Characters of an embedded text resource put into the output (the tool's max_output_chars still caps the whole)."""


@dataclass(frozen=True)
class McpImage:
    """An image a tool returned: its MIME type, base64 data and, for PNG, its size."""

    mime: str
    data: str
    note: str
    """What the model reads in its place: ``[image/png 20x20 from server everything]``."""


@dataclass
class Outcome:
    """A call's result: the text the model reads, whether the server marked it an error, its images."""

    text: str
    is_error: bool = False
    images: list[McpImage] = field(default_factory=list)


def outcome(result: Any, server: str) -> Outcome:
    """Map an SDK ``CallToolResult`` to an :class:`Outcome`."""
    parts: list[str] = []
    images: list[McpImage] = []
    texts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
            texts.append(block.text)
        elif kind == "image":
            image = McpImage(block.mime_type, block.data, image_note(block.mime_type, block.data, server))
            images.append(image)
            parts.append(image.note)
        elif kind == "audio":
            parts.append(f"[{block.mime_type} audio from server {server}, not shown]")
        elif kind == "resource_link":
            about = f" ({block.mime_type})" if block.mime_type else ""
            what = f": {block.description}" if block.description else ""
            parts.append(f"[resource link {block.name} <{block.uri}>{about}{what}]")
        elif kind == "resource":
            parts.append(resource_summary(block.resource))
        else:
            parts.append(f"[{kind or type(block).__name__} content, not shown]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(_is_json_of(text, structured) for text in texts):
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(no output)"
    return Outcome(text, bool(getattr(result, "is_error", False)), images)


def resource_summary(resource: Any) -> str:
    """An embedded resource: its URI, type and size, and the start of its text (a blob only by its size)."""
    mime = getattr(resource, "mime_type", None) or "unknown type"
    text = getattr(resource, "text", None)
    if text is not None:
        shown = redact_text(text)  # whole, before it is cut
        shown = shown if len(shown) <= RESOURCE_TEXT_CHARS else shown[:RESOURCE_TEXT_CHARS] + "…"
        return f"[embedded resource {resource.uri}, {mime}, {len(text):,} characters]\n{shown}"
    blob = getattr(resource, "blob", "") or ""
    return f"[embedded resource {resource.uri}, {mime}, about {len(blob) * 3 // 4:,} bytes, not shown]"


def image_note(mime: str, data: str, server: str) -> str:
    """``[image/png 20x20 from server everything]`` (the size only for a PNG whose header can be read)."""
    size = encoded_size(mime, data) if mime == "image/png" else None
    return f"[{mime}{' {}x{}'.format(*size) if size else ''} from server {server}]"


def _is_json_of(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def resource_outcome(result: Any, server: str) -> Outcome:
    """A ``resources/read`` result as what the model reads: each part's text whole (a text blob decoded), an image
    as an :class:`McpImage` and its note, any other blob by its type and size."""
    parts: list[str] = []
    images: list[McpImage] = []
    for contents in result.contents:
        mime = getattr(contents, "mime_type", None) or ""
        text = getattr(contents, "text", None)
        blob = getattr(contents, "blob", None)
        if text is None and blob is not None and mime.startswith("text/"):
            with contextlib.suppress(ValueError, UnicodeError):
                text = base64.b64decode(blob, validate=True).decode()
        if text is not None:
            parts.append(f"[{contents.uri}, {mime or 'text'}]\n{text}" if len(result.contents) > 1 else text)
        elif blob is not None and mime.startswith("image/"):
            image = McpImage(mime, blob, image_note(mime, blob, server))
            images.append(image)
            parts.append(image.note)
        else:
            parts.append(f"[{contents.uri}, {mime or 'unknown type'}, about {len(blob or '') * 3 // 4:,} bytes, "
                         "not shown]")
    return Outcome("\n\n".join(parts) if parts else "(the resource is empty)", False, images)


def prompt_text(result: Any) -> str:
    """A ``prompts/get`` result's messages as one prompt: their text, an embedded resource's text whole, anything
    else by a note; when the messages are not all the user's, each says whose it is."""
    parts = []
    for message in result.messages:
        content = message.content
        kind = getattr(content, "type", None)
        if kind == "text":
            text = content.text
        elif kind == "resource":
            resource = content.resource
            text = getattr(resource, "text", None) or resource_summary(resource)
        else:
            text = f"[{getattr(content, 'mime_type', None) or kind} content of the prompt, not shown]"
        parts.append((message.role, text))
    if all(role == "user" for role, _ in parts):
        return "\n\n".join(text for _, text in parts)
    return "\n\n".join(f"({role}) {text}" for role, text in parts)
