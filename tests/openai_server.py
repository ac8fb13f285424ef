"""A real HTTP server on 127.0.0.1 that answers the openai SDK with scripted SSE streams.

Used by the adapter and cassette tests: the SDK talks to it over a real socket (no patching), each POST gets
the next scripted :class:`Reply`, every request body is kept, and a handler that finds the client gone records
when it noticed (``disconnected``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer: an SSE stream (``events``) or, for ``status`` >= 400, a JSON error body."""

    events: list[str] = field(default_factory=list)
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before each SSE event."""
    cut_after: int | None = None
    """Drop the connection after this many events, without finishing the chunked body."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedServer:
    """``with ScriptedServer(reply, ...) as server:`` serves on ``server.url`` (a ``/v1`` base URL)."""

    def __init__(self, *replies: Reply):
        self.replies = list(replies)
        self.requests: list[Received] = []
        self.disconnected = threading.Event()
        self.disconnected_at: float | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self.replies:
                return self.replies.pop(0)
        return Reply(status=500, body={"error": {"message": "the test server has no scripted reply left"}},
                     headers={"x-should-retry": "false"})

    def mark_disconnected(self) -> None:
        if not self.disconnected.is_set():
            self.disconnected_at = time.monotonic()
            self.disconnected.set()

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            reply = server.next_reply(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            try:
                if reply.status >= 400:
                    self._send_json(reply)
                else:
                    self._send_stream(reply)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                server.mark_disconnected()
                self.close_connection = True

        def _send_json(self, reply: Reply) -> None:
            data = json.dumps(reply.body or {}).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_stream(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            for sent, event in enumerate(reply.events):
                if reply.cut_after is not None and sent >= reply.cut_after:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if reply.delay:
                    time.sleep(reply.delay)
                data = event.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


# -- SSE bodies in the shapes the real APIs send ------------------------------------------------------------------


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def responses_events(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, str]] = (),
    usage: tuple[int, int] = (10, 5),
    complete: bool = True,
    incomplete: str | None = None,
) -> list[str]:
    """A Responses API stream: text deltas, then one function_call item per (call_id, name, arguments).

    ``incomplete`` ends it with ``response.incomplete`` for that reason instead of ``response.completed``.
    """
    seq = iter(range(10_000))
    response: dict[str, Any] = {"id": "resp_1", "object": "response", "created_at": 0, "model": "test-model",
                                "status": "in_progress", "output": [], "usage": None}
    events = [_sse({"type": "response.created", "sequence_number": next(seq), "response": response},
                   "response.created")]
    output: list[dict[str, Any]] = []
    if text:
        message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}
        events.append(_sse({"type": "response.output_item.added", "sequence_number": next(seq),
                            "output_index": 0, "item": message}, "response.output_item.added"))
        for piece in text:
            events.append(_sse({"type": "response.output_text.delta", "sequence_number": next(seq),
                                "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": piece,
                                "logprobs": []}, "response.output_text.delta"))
        done = dict(message, status="completed",
                    content=[{"type": "output_text", "text": "".join(text), "annotations": []}])
        events.append(_sse({"type": "response.output_item.done", "sequence_number": next(seq),
                            "output_index": 0, "item": done}, "response.output_item.done"))
        output.append(done)
    for call_id, name, arguments in calls:
        index = len(output)
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": name,
                "arguments": "", "status": "in_progress"}
        events.append(_sse({"type": "response.output_item.added", "sequence_number": next(seq),
                            "output_index": index, "item": item}, "response.output_item.added"))
        events.append(_sse({"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                            "item_id": item["id"], "output_index": index, "delta": arguments},
                           "response.function_call_arguments.delta"))
        done = dict(item, arguments=arguments, status="completed")
        events.append(_sse({"type": "response.output_item.done", "sequence_number": next(seq),
                            "output_index": index, "item": done}, "response.output_item.done"))
        output.append(done)
    if complete:
        final = dict(response, status="incomplete" if incomplete else "completed", output=output, usage={
            "input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage),
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}})
        kind = "response.completed"
        if incomplete:
            final["incomplete_details"] = {"reason": incomplete}
            kind = "response.incomplete"
        events.append(_sse({"type": kind, "sequence_number": next(seq), "response": final}, kind))
    return events


def responses_call_started(call_id: str, name: str, arguments: str, index: int = 0) -> list[str]:
    """The start of a function_call item that is never finished: added, then one arguments delta."""
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name, "arguments": "",
            "status": "in_progress"}
    return [_sse({"type": "response.output_item.added", "sequence_number": 50, "output_index": index, "item": item},
                 "response.output_item.added"),
            _sse({"type": "response.function_call_arguments.delta", "sequence_number": 51, "item_id": item["id"],
                  "output_index": index, "delta": arguments}, "response.function_call_arguments.delta")]


def chat_chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
               usage: tuple[int, int] | None = None) -> str:
    """One ``chat.completion.chunk`` SSE event (``delta=None`` makes the usage-only final chunk)."""
    chunk: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                             "model": "test-model", "choices": []}
    if delta is not None:
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return _sse(chunk)


def chat_events(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    usage: tuple[int, int] = (10, 5),
    finish: str | None = None,
) -> list[str]:
    """A Chat Completions stream; each call is (id, name, argument pieces), its pieces in separate chunks.

    ``finish`` is the finish_reason (default: ``tool_calls`` when there are calls, else ``stop``).
    """
    events = [chat_chunk({"role": "assistant", "content": ""})]
    events += [chat_chunk({"content": piece}) for piece in text]
    for index, (call_id, name, pieces) in enumerate(calls):
        events.append(chat_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                  "function": {"name": name, "arguments": ""}}]}))
        events += [chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in pieces]
    events.append(chat_chunk({}, finish=finish or ("tool_calls" if calls else "stop")))
    events.append(chat_chunk(None, usage=usage))
    events.append("data: [DONE]\n\n")
    return events


# -- helpers shared by the tests ----------------------------------------------------------------------------------

TEST_KEY = "sk-test-SECRET-0123456789abcdef"
"""The key the tests send; it must never show up in an error message or a cassette."""


def user_request(text: str = "hi", tools: Sequence[dict[str, Any]] = ()) -> Any:
    from agentkernel.models.base import ModelRequest

    return ModelRequest("be brief", [{"type": "message", "role": "user", "content": text}], list(tools))


async def collect(model: Any, request: Any) -> list[Any]:
    """Every event a model streams for one request."""
    return [event async for event in model.stream(request)]


def without_progress(events: list[Any]) -> list[Any]:
    """The events less the FunctionCallProgress ones (which say a call is on its way)."""
    from agentkernel.models import FunctionCallProgress

    return [event for event in events if not isinstance(event, FunctionCallProgress)]


def lookup_tool() -> Any:
    """A read-only tool for round trips: ``lookup(word)`` answers ``"<word> means ..."``."""
    from agentkernel import tool

    @tool
    def lookup(word: str) -> str:
        """Look a word up in the dictionary."""
        return f"{word} means something"

    return lookup
