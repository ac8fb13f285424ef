"""A real HTTP server on 127.0.0.1 that answers the openai SDK with scripted SSE streams.

Used by the adapter and cassette tests: the SDK talks to it over a real socket (no patching), each POST gets
the next scripted :class:`Reply`, every request body is kept, and a handler that finds the client gone records
when it noticed (``disconnected``).

:class:`WindowServer` is the same server with a context window: it counts each request's prompt tokens its own
way, answers a request that fits from a function of the request, and refuses one that does not with the body a
real server sends (OpenAI, llama.cpp or vLLM).
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal


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

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """The status and JSON body a GET of ``path`` gets (this server serves none)."""
        return 404, {"error": {"message": f"no such endpoint: GET {path}", "type": "not_found_error"}}

    def get_with_headers(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """A GET with its (lower-cased) headers: :meth:`get` unless a server needs them."""
        return self.get(path)

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

        def do_GET(self) -> None:
            status, body = server.get_with_headers(self.path, {k.lower(): v for k, v in self.headers.items()})
            self._send_json(Reply(status=status, body=body))

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
    cached: int = 0,
) -> list[str]:
    """A Responses API stream: text deltas, then one function_call item per (call_id, name, arguments).

    ``incomplete`` ends it with ``response.incomplete`` for that reason instead of ``response.completed``;
    ``cached`` is the usage's ``input_tokens_details.cached_tokens``.
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
            "input_tokens_details": {"cached_tokens": cached}, "output_tokens_details": {"reasoning_tokens": 0}})
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
               usage: tuple[int, int] | None = None, cached: int = 0) -> str:
    """One ``chat.completion.chunk`` SSE event (``delta=None`` makes the usage-only final chunk; ``cached``: its
    ``prompt_tokens_details.cached_tokens``)."""
    chunk: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                             "model": "test-model", "choices": []}
    if delta is not None:
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage),
                          "prompt_tokens_details": {"cached_tokens": cached}}
    return _sse(chunk)


def chat_events(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    usage: tuple[int, int] | None = (10, 5),
    finish: str | None = None,
    cached: int = 0,
) -> list[str]:
    """A Chat Completions stream; each call is (id, name, argument pieces), its pieces in separate chunks.

    ``finish`` is the finish_reason (default: ``tool_calls`` when there are calls, else ``stop``); ``usage=None``
    leaves out the usage chunk (the API sends it only when ``stream_options.include_usage`` is set).
    """
    events = [chat_chunk({"role": "assistant", "content": ""})]
    events += [chat_chunk({"content": piece}) for piece in text]
    for index, (call_id, name, pieces) in enumerate(calls):
        events.append(chat_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                  "function": {"name": name, "arguments": ""}}]}))
        events += [chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in pieces]
    events.append(chat_chunk({}, finish=finish or ("tool_calls" if calls else "stop")))
    if usage is not None:
        events.append(chat_chunk(None, usage=usage, cached=cached))
    events.append("data: [DONE]\n\n")
    return events


# -- a server with a context window -------------------------------------------------------------------------------

Overflow = Literal["openai", "llamacpp", "vllm", "openai_sse_error", "openai_response_failed"]
"""How :class:`WindowServer` refuses a request that does not fit, each exactly as that server does it:

- ``openai``: HTTP 400, ``error.code`` ``context_length_exceeded`` (Chat: "This model's maximum context length is
  N tokens. However, your messages resulted in M tokens ..."; Responses: "Your input exceeds the context window
  of this model ...", which names no numbers);
- ``llamacpp``: HTTP 400, ``error.type`` ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``
  (captured from llama.cpp's server in xllamacpp 2026.10.11549; the same body for both APIs, streamed or not);
- ``vllm``: HTTP 400, ``error.type`` ``BadRequestError``, "This model's maximum context length is N tokens.
  However, you requested K output tokens and your prompt contains at least M input tokens, ..." — where M is
  N - K + 1, not the real count: vLLM cuts the prompt there before it counts;
- ``openai_sse_error`` / ``openai_response_failed`` (Responses only; a Chat request gets ``openai``'s 400): HTTP
  200 and a stream that starts (``response.created``, ``response.in_progress``) and then carries an ``error``
  event (the error nested under ``error``, as the API really sends it, which the SDK raises as ``APIError``) or
  a ``response.failed`` event whose ``response.error.code`` is ``context_length_exceeded``.
"""

OPENAI_INPUT_TOO_LONG = "Your input exceeds the context window of this model. Please adjust your input and try again."


def count_tokens(body: dict[str, Any]) -> int:
    """The prompt tokens :class:`WindowServer` charges for a request: the UTF-8 bytes of the whole request body as
    compact JSON, divided by 3.5, rounded up.

    Deliberately not the client's arithmetic (a client estimating characters of text / 4 undercounts it by some
    20–40%: JSON keys, quoting and escapes count here), so a client can only learn it from ``usage`` and from the
    overflow errors, as with a real tokenizer.
    """
    return math.ceil(len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()) / 3.5)


@dataclass
class Answer:
    """What :class:`WindowServer` streams for a request that fits, in the shape of the API it was sent to."""

    text: Sequence[str] = ()
    """The text deltas."""
    calls: Sequence[tuple[str, str, str]] = ()
    """One tool call per (call_id, name, arguments JSON)."""
    output_tokens: int | None = None
    """Reported in ``usage``; default: the characters of text and arguments / 4, at least 1."""

    def tokens(self) -> int:
        if self.output_tokens is not None:
            return self.output_tokens
        return max(1, (sum(map(len, self.text)) + sum(len(arguments) for _, _, arguments in self.calls)) // 4)


@dataclass
class Measured:
    """One request :class:`WindowServer` received, with the prompt tokens it counted and whether it refused it."""

    received: Received
    prompt_tokens: int
    refused: bool

    @property
    def api(self) -> Literal["chat", "responses"]:
        return "chat" if self.received.path.endswith("/chat/completions") else "responses"

    def items(self) -> list[dict[str, Any]]:
        """The history the request carries, as Responses items (a Chat request's messages converted)."""
        body = self.received.body
        if self.api == "responses":
            source = body.get("input", [])
            return [{"type": "message", "role": "user", "content": source}] if isinstance(source, str) else source
        items: list[dict[str, Any]] = []
        for message in body.get("messages", []):
            if message.get("role") == "tool":
                items.append({"type": "function_call_output", "call_id": message.get("tool_call_id"),
                              "output": message.get("content")})
                continue
            if message.get("content") or not message.get("tool_calls"):
                items.append({"type": "message", "role": message.get("role"), "content": message.get("content")})
            for call in message.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call.get("id"),
                              "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
        return items

    def problems(self) -> list[str]:
        """How the history the request carries breaks the call/output invariant (empty when it holds)."""
        from agentkernel.record.history import history_problems

        return history_problems(self.items())


def _requested_output(body: dict[str, Any]) -> int:
    for key in ("max_output_tokens", "max_completion_tokens", "max_tokens"):
        if isinstance(body.get(key), int):
            return body[key]
    return 0


class WindowServer(ScriptedServer):
    """A fake OpenAI-compatible server that enforces a context window of ``window`` tokens, for both APIs.

    ``with WindowServer(window=8000, overflow="llamacpp", reply=answer) as server:`` serves on ``server.url``.
    Each POST to ``/v1/chat/completions`` or ``/v1/responses`` is counted with :func:`count_tokens` (or
    ``count``); one of more than ``window`` tokens is refused as ``overflow`` says (see :data:`Overflow`; the real
    servers' boundaries differ by a token: llama.cpp refuses at n_ctx, vLLM also counts the requested output
    tokens), one that fits gets ``reply(body, prompt_tokens)`` streamed, with ``prompt_tokens`` in its usage (Chat:
    a final usage chunk when ``stream_options.include_usage`` is set; Responses: ``response.completed``). ``reply``
    returns an :class:`Answer`, or a :class:`Reply` to send as it is. :attr:`measured` keeps every request with its
    count, refused or not; :attr:`window` may be changed while serving.

    GET ``/v1/models`` answers as the server ``overflow`` names (llama.cpp: ``meta.n_ctx``; vLLM:
    ``max_model_len``; OpenAI: no window); GET ``/props`` answers llama.cpp-style
    (``default_generation_settings.n_ctx``) when ``props`` is true, by default when ``overflow`` is ``llamacpp``.
    """

    model = "test-model"

    def __init__(self, window: int, overflow: Overflow = "openai",
                 reply: Callable[[dict[str, Any], int], Answer | Reply] | None = None,
                 count: Callable[[dict[str, Any]], int] = count_tokens, props: bool | None = None):
        super().__init__()
        self.window = window
        self.overflow = overflow
        self.reply = reply or (lambda body, prompt_tokens: Answer(["ok"]))
        self.count = count
        self.props = overflow == "llamacpp" if props is None else props
        self.measured: list[Measured] = []

    def refused(self) -> list[Measured]:
        return [request for request in self.measured if request.refused]

    def next_reply(self, received: Received) -> Reply:
        body = received.body
        prompt_tokens = self.count(body)
        chat = received.path.endswith("/chat/completions")
        refused = prompt_tokens > self.window
        with self._lock:
            self.requests.append(received)
            self.measured.append(Measured(received, prompt_tokens, refused))
        if not body.get("stream"):
            return Reply(status=400, body={"error": {"message": "the test server streams only (send stream=true)",
                                                     "type": "invalid_request_error"}})
        if refused:
            return self.overflow_reply(chat, prompt_tokens, _requested_output(body))
        answer = self.reply(body, prompt_tokens)
        if isinstance(answer, Reply):
            return answer
        return self.answer_reply(chat, body, prompt_tokens, answer)

    def answer_reply(self, chat: bool, body: dict[str, Any], prompt_tokens: int, answer: Answer,
                     cached: int = 0, cut: bool = False) -> Reply:
        """``answer`` streamed in the shape of the API the request went to, with ``prompt_tokens`` (of which
        ``cached`` from a prompt cache) in its usage; ``cut``: ended as cut at the request's output cap."""
        if chat:
            include_usage = (body.get("stream_options") or {}).get("include_usage")
            usage = (prompt_tokens, answer.tokens()) if include_usage else None
            calls = [(call_id, name, [arguments]) for call_id, name, arguments in answer.calls]
            return Reply(chat_events(answer.text, calls, usage=usage, cached=cached, finish="length" if cut else None))
        return Reply(responses_events(answer.text, answer.calls, usage=(prompt_tokens, answer.tokens()),
                                      cached=cached, incomplete="max_output_tokens" if cut else None))

    def overflow_reply(self, chat: bool, prompt_tokens: int, output_tokens: int = 0) -> Reply:
        """The refusal of a ``prompt_tokens`` request, as :attr:`overflow` says (``output_tokens``: its cap)."""
        window, kind = self.window, self.overflow
        if kind == "llamacpp":
            return Reply(status=400, body={"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt_tokens, "n_ctx": window,
                "message": f"request ({prompt_tokens} tokens) exceeds the available context size ({window} tokens), "
                           "try increasing it"}})
        if kind == "vllm":
            at_least = max(1, window - output_tokens + 1)
            return Reply(status=400, body={"error": {
                "message": f"This model's maximum context length is {window} tokens. However, you requested "
                           f"{output_tokens} output tokens and your prompt contains at least {at_least} input "
                           f"tokens, for a total of at least {at_least + output_tokens} tokens. Please reduce the "
                           "length of the input prompt or the number of requested output tokens. "
                           f"(parameter=input_tokens, value={at_least})",
                "type": "BadRequestError", "param": "input_tokens", "code": 400}})
        if chat or kind == "openai":
            message = (f"This model's maximum context length is {window} tokens. However, your messages resulted "
                       f"in {prompt_tokens} tokens. Please reduce the length of the messages."
                       if chat else OPENAI_INPUT_TOO_LONG)
            return Reply(status=400, body={"error": {"message": message, "type": "invalid_request_error",
                                                     "param": "messages" if chat else "input",
                                                     "code": "context_length_exceeded"}})
        response: dict[str, Any] = {"id": "resp_1", "object": "response", "created_at": 0, "model": self.model,
                                    "status": "in_progress", "output": [], "usage": None, "error": None}
        events = [_sse({"type": "response.created", "sequence_number": 0, "response": response}, "response.created"),
                  _sse({"type": "response.in_progress", "sequence_number": 1, "response": response},
                       "response.in_progress")]
        if kind == "openai_sse_error":
            events.append(_sse({"type": "error", "sequence_number": 2, "error": {
                "type": "invalid_request_error", "code": "context_length_exceeded",
                "message": OPENAI_INPUT_TOO_LONG, "param": "input"}}, "error"))
        else:
            failed = dict(response, status="failed",
                          error={"code": "context_length_exceeded", "message": OPENAI_INPUT_TOO_LONG})
            events.append(_sse({"type": "response.failed", "sequence_number": 2, "response": failed},
                               "response.failed"))
        return Reply(events)

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/props" and self.props:
            return 200, {
                "default_generation_settings": {"n_ctx": self.window, "params": {"n_predict": -1, "seed": 42}},
                "total_slots": 1, "model_alias": self.model, "model_path": f"/models/{self.model}.gguf",
                "modalities": {"vision": False, "video": False, "audio": False},
                "chat_template_caps": {"supports_tools": True, "supports_tool_calls": True},
                "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "build_info": "b0-unknown",
                "is_sleeping": False}
        if path == "/v1/models":
            card: dict[str, Any] = {"id": self.model, "object": "model", "created": 0}
            if self.overflow == "llamacpp":
                card.update(owned_by="llamacpp", aliases=[self.model], meta={
                    "vocab_type": 2, "n_vocab": 49152, "n_ctx": self.window, "n_ctx_train": 8192})
            elif self.overflow == "vllm":
                card.update(owned_by="vllm", root=self.model, parent=None, max_model_len=self.window)
            else:
                card.update(owned_by="system")
            return 200, {"object": "list", "data": [card]}
        return super().get(path)


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


class StopAfterText:
    """An ``on_event`` listener that presses ``stop`` ``delay`` seconds after the first streamed text; ``stopped_at``
    is when it did (``time.monotonic()``). ``cancel()`` drops a press still pending."""

    def __init__(self, stop: Any, delay: float = 0.3):
        self.stop = stop
        self.delay = delay
        self.stopped_at: float | None = None
        self._timer: threading.Timer | None = None

    def __call__(self, event: object) -> None:
        from agentkernel.models import TextDelta

        if isinstance(event, TextDelta) and self._timer is None:
            self._timer = threading.Timer(self.delay, self._press)
            self._timer.start()

    def _press(self) -> None:
        self.stopped_at = time.monotonic()
        self.stop.set()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
