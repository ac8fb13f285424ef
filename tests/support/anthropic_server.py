"""Anthropic Messages SSE streams for :class:`openai_server.ScriptedServer` (the same loopback HTTP server: it
answers any POST with the next scripted reply and keeps each request's path, headers and body).

The events are shaped as the Messages API sends them: ``message_start`` (usage with the cache fields),
``content_block_start`` / ``_delta`` / ``_stop`` per block, ``message_delta`` (the stop reason, the final usage),
``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n"


def messages_events(
    texts: list[str] = (),  # type: ignore[assignment]
    calls: list[tuple[str, str, list[str]]] = (),  # type: ignore[assignment]
    *,
    thinking: list[tuple[str, str]] = (),  # type: ignore[assignment]
    redacted: list[str] = (),  # type: ignore[assignment]
    usage: tuple[int, int] = (10, 5),
    cache: tuple[int, int] = (0, 0),
    stop_reason: str | None = None,
    end: bool = True,
) -> list[str]:
    """A whole streamed message: thinking blocks (text, signature), redacted ones, one text block streamed in
    ``texts`` pieces, then ``tool_use`` blocks (id, name, input JSON pieces). ``usage`` is (input, output) and
    ``cache`` (read, created), reported as the API does: the cache tokens apart from ``input_tokens``."""
    read, created = cache
    events = [_sse("message_start", {"message": {
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1, "cache_read_input_tokens": read,
                  "cache_creation_input_tokens": created}}})]
    index = 0
    for text, signature in thinking:
        events += [_sse("content_block_start", {"index": index, "content_block": {
                        "type": "thinking", "thinking": "", "signature": ""}}),
                   _sse("content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": text}}),
                   _sse("content_block_delta", {"index": index, "delta": {"type": "signature_delta",
                                                                          "signature": signature}}),
                   _sse("content_block_stop", {"index": index})]
        index += 1
    for data in redacted:
        events += [_sse("content_block_start", {"index": index, "content_block": {"type": "redacted_thinking",
                                                                                 "data": data}}),
                   _sse("content_block_stop", {"index": index})]
        index += 1
    if texts:
        events.append(_sse("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
        events += [_sse("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
                   for piece in texts]
        events.append(_sse("content_block_stop", {"index": index}))
        index += 1
    for call_id, name, pieces in calls:
        events.append(_sse("content_block_start", {"index": index, "content_block": {
            "type": "tool_use", "id": call_id, "name": name, "input": {}}}))
        events += [_sse("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                          "partial_json": piece}}) for piece in pieces]
        events.append(_sse("content_block_stop", {"index": index}))
        index += 1
    reason = stop_reason or ("tool_use" if calls else "end_turn")
    if end:
        events += [_sse("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": None},
                                          "usage": {"output_tokens": usage[1]}}),
                   _sse("message_stop", {})]
    return events


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error body as the Messages API sends one."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def sent_key(headers: dict[str, str]) -> str | None:
    """The key a request carried: ``x-api-key``, or the bearer token (the SDK sends the key as one since 2.x)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    bearer = headers.get("authorization", "")
    return bearer.removeprefix("Bearer ") if bearer else None
