"""The Anthropic Messages API (``anthropic`` SDK, ``jupyter-agentkernel[anthropic]``) as a streaming model, with prompt
caching on: every request reads the one before it from the cache."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

import anthropic
from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)

from ..record.history import Item
from ..secrets import without_credentials
from ._api import ApiModel, InputCache
from .base import (
    THINKING_KEY,
    FunctionCallEvent,
    FunctionCallProgress,
    ModelError,
    ModelEvent,
    ModelRequest,
    Thinking,
    Truncation,
    UsageEvent,
    is_count,
    text_delta,
)
from .provider import ANTHROPIC, Provider, anthropic_root, same_url

DEFAULT_TIMEOUT = anthropic.Timeout(600.0, connect=10.0)
"""Long enough for a slow model's whole answer, short enough to notice an unreachable server."""

DEFAULT_MAX_TOKENS = 8192
"""The output cap sent when none is given: the Messages API requires one."""

CACHE = {"type": "ephemeral"}
"""A prompt-cache breakpoint (``cache_control``): the prefix up to and including the block it is on is cached."""

TRUNCATING_STOP_REASONS = ("max_tokens", "model_context_window_exceeded", "refusal")


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses-shaped function schemas as Anthropic tools (``name``, ``description``, ``input_schema``)."""
    converted = []
    for tool in tools:
        if tool.get("type") == "function" and "function" not in tool:
            schema = tool.get("parameters") or {"type": "object", "properties": {}}
            converted.append({"name": tool["name"], "description": tool.get("description") or "",
                              "input_schema": schema})
        else:  # already Anthropic's shape, or a server tool: passed on as it is
            converted.append(tool)
    return converted


def _image_block(image: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": image["media_type"], "data": image["data"]}}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _arguments(arguments: str | None) -> dict[str, Any]:
    """A call's arguments as the ``input`` object a ``tool_use`` block holds ({} when they are not a JSON object:
    the tool's output already told the model what was wrong with them)."""
    try:
        value = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deeply to read
        return {}
    return value if isinstance(value, dict) else {}


def add_message(messages: list[dict[str, Any]], item: Item) -> None:
    """Append a history item to Anthropic messages, merging it into the last message when the roles agree.

    An assistant turn (its text, then its calls as ``tool_use`` blocks) is one assistant message that starts with
    the turn's thinking blocks, if it kept any; the outputs of a round are ``tool_result`` blocks (with their
    images) at the start of the next user message, matched by ``tool_use_id``. Empty text is left out (the API
    refuses an empty text block).
    """
    kind = item.get("type")
    thinking = item.get(THINKING_KEY) or []
    if kind == "function_call":
        role, blocks = "assistant", [{"type": "tool_use", "id": item["call_id"], "name": item["name"],
                                      "input": _arguments(item.get("arguments"))}]
    elif kind == "function_call_output":
        output = _text(item.get("output"))
        content: Any = output
        if item.get("images"):
            content = [{"type": "text", "text": output or "(no text)"}, *map(_image_block, item["images"])]
        role, blocks = "user", [{"type": "tool_result", "tool_use_id": item["call_id"], "content": content}]
    elif kind == "message" or "role" in item:
        text = _text(item.get("content"))
        role = "assistant" if item.get("role") == "assistant" else "user"
        blocks = [{"type": "text", "text": text}] if text.strip() else []
    else:
        return
    last = messages[-1] if messages else None
    if last is not None and last["role"] == role and not thinking:
        last["content"].extend(blocks)
    elif blocks or thinking:
        messages.append({"role": role, "content": [*thinking, *blocks]})


def with_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a cache breakpoint on the newest message and on the one the request before ended with (the
    last user message before the newest assistant turn), so this request reads the previous one from the cache
    however many blocks the last round added. The converted messages are shared between requests, so the two
    marked messages are copies."""
    marked = list(messages)
    ends = [len(marked) - 1]
    after_assistant = False
    for index in range(len(marked) - 1, -1, -1):  # from the newest back: a few steps
        if marked[index]["role"] == "assistant":
            after_assistant = True
        elif after_assistant:
            ends.append(index)
            break
    for index in ends:
        if index < 0 or not marked[index]["content"]:
            continue
        content = list(marked[index]["content"])
        content[-1] = {**content[-1], "cache_control": CACHE}
        marked[index] = {**marked[index], "content": content}
    return marked


@dataclass
class _Block:
    """A content block as it streams: text, a ``tool_use`` (its input JSON so far) or a thinking block."""

    kind: str
    call_id: str = ""
    name: str = ""
    arguments: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""
    start_input: str = ""
    """A ``tool_use`` block's input as its start gave it (JSON; the API sends ``{}`` there, then the deltas)."""

    def kept(self) -> dict[str, Any] | None:
        """The block as it goes back to the API in the history (thinking only), else None."""
        if self.kind == "thinking":
            return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}
        if self.kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.data}
        return None


class AnthropicMessagesModel(ApiModel):
    """Streams answers from the Anthropic Messages API (``client.messages.create(stream=True)``).

    ``AnthropicMessagesModel("claude-sonnet-4-5")`` reads ``ANTHROPIC_API_KEY``, which goes only to the Anthropic
    API or to the ``ANTHROPIC_BASE_URL`` the environment names; ``base_url`` is a server's root as the SDK takes it
    (llama.cpp's, say: ``http://127.0.0.1:8080``; a trailing ``/v1`` is dropped), which gets a key only when
    ``api_key`` or ``api_key_env`` names one. The SDK retries ``max_retries`` times on connection errors,
    408/409/429 and 5xx before an error becomes a key-free :class:`ModelError` (a prompt too long for the window:
    :class:`~agentkernel.models.base.ContextOverflowError`).

    Text streams as it comes; ``tool_use`` blocks become calls when their block ends; ``thinking`` and
    ``redacted_thinking`` blocks come back as one :class:`~agentkernel.models.base.Thinking` event, which the loop
    keeps on the turn's history item and this adapter sends back in front of the turn. ``thinking`` (a token
    budget) asks for extended thinking. A ``stop_reason`` of ``max_tokens`` ends the response with a
    :class:`Truncation`. ``max_output_tokens`` defaults to :data:`DEFAULT_MAX_TOKENS` (the API needs one).

    Prompt caching (``cache=True``): a breakpoint on the system prompt (which caches the tools before it), one
    on the newest message and one on the message the previous request ended with; usage reports the cache
    reads and writes (``input_tokens`` counts all input, those included).
    """

    sdk = anthropic
    sdk_error = anthropic.AnthropicError

    def __init__(self, model: str, *, client: anthropic.AsyncAnthropic | None = None, base_url: str | None = None,
                 api_key: str | None = None, api_key_env: str | None = None, max_output_tokens: int | None = None,
                 temperature: float | None = None, max_retries: int = 2,
                 timeout: float | anthropic.Timeout | None = DEFAULT_TIMEOUT, thinking: int | None = None,
                 cache: bool = True, provider: Provider = ANTHROPIC, price_provider: str | None = None):
        super().__init__(model, provider=provider, client=client,
                         base_url=anthropic_root(base_url) if base_url else None, api_key=api_key,
                         api_key_env=api_key_env, max_output_tokens=max_output_tokens, temperature=temperature,
                         max_retries=max_retries, timeout=timeout, price_provider=price_provider)
        self.thinking = thinking
        self.cache = cache
        self._messages = InputCache(add_message)

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client (made on first access; again on another event loop)."""
        client: anthropic.AsyncAnthropic = self._shared_client()
        return client

    def _new_client(self, api_key: str) -> anthropic.AsyncAnthropic:
        # The key and URL are given explicitly, so that the SDK's own reading of ANTHROPIC_BASE_URL and
        # ANTHROPIC_AUTH_TOKEN never sends a credential elsewhere than the provider's rules allow; the headers of
        # $ANTHROPIC_CUSTOM_HEADERS (a gateway's credentials, say), which the SDK adds to every request, go only
        # where the key may go.
        kept = self.provider.key_may_go_to(self._base_url)
        omitted = {} if kept else {name: anthropic.Omit() for name in _custom_header_names()}
        return anthropic.AsyncAnthropic(api_key=api_key, auth_token=None, base_url=self._root(),
                                        max_retries=self._max_retries, timeout=self._timeout,
                                        default_headers=cast(dict[str, str], omitted) or None)  # Omit: drop it

    def _root(self) -> str:
        return self._base_url or self.provider.default_url() or ANTHROPIC.url or ""

    @property
    def base_url(self) -> str:
        """The server's root, without any credentials it might embed (safe to show)."""
        url = str(self._client.base_url) if self._client is not None else self._root()
        return without_credentials(url).rstrip("/")

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def accepts_images(self) -> bool:
        """Images by default only for the Anthropic API itself (a local server may be text-only)."""
        return same_url(self.base_url, self.provider.url or "")

    def request_options(self, request: ModelRequest) -> dict[str, Any]:
        """The ``messages.create`` arguments for ``request`` (without ``stream``)."""
        messages = self._messages.convert(request.history)
        tools = anthropic_tools(request.tools)
        system: list[dict[str, Any]] = [{"type": "text", "text": request.system}] if request.system else []
        if self.cache:
            messages = with_breakpoints(messages)
            if system:
                system[-1]["cache_control"] = CACHE
            elif tools:
                tools[-1] = {**tools[-1], "cache_control": CACHE}
        options: dict[str, Any] = {"model": self.model, "messages": messages,
                                   "max_tokens": self.output_cap(request, DEFAULT_MAX_TOKENS)}
        if system:
            options["system"] = system
        if tools:
            options["tools"] = tools
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.thinking:
            options["thinking"] = {"type": "enabled", "budget_tokens": self.thinking}
        return options

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        opening = self.client.messages.create(stream=True, **cast(Any, self.request_options(request)))
        blocks: dict[int, _Block] = {}
        usage: dict[str, Any] = {}
        stop: str | None = None
        ended = False
        async with self._api_stream(opening) as events:
            async for event in events:
                if isinstance(event, RawMessageStartEvent):
                    _read_usage(usage, getattr(event.message, "usage", None), "output_tokens")
                elif isinstance(event, RawContentBlockStartEvent):
                    fields: dict[str, Any] = event.content_block.model_dump(warnings=False)  # it may hold anything
                    started = blocks[event.index] = _Block(
                        str(fields.get("type")), call_id=fields.get("id") or "", name=fields.get("name") or "",
                        thinking=fields.get("thinking") or "", signature=fields.get("signature") or "",
                        data=fields.get("data") or "", start_input=json.dumps(fields.get("input") or {}))
                    if started.kind == "text" and fields.get("text"):
                        yield text_delta(fields["text"])
                    elif started.kind == "tool_use":
                        yield FunctionCallProgress(started.call_id, started.name, 0)
                elif isinstance(event, RawContentBlockDeltaEvent):
                    delta, current = event.delta, blocks.get(event.index)
                    if delta.type == "text_delta":
                        yield text_delta(delta.text)
                    elif current is None:
                        continue
                    elif delta.type == "input_json_delta":
                        current.arguments += delta.partial_json
                        yield FunctionCallProgress(current.call_id, current.name, len(current.arguments))
                    elif delta.type == "thinking_delta":
                        current.thinking += delta.thinking
                    elif delta.type == "signature_delta":
                        current.signature += delta.signature
                elif isinstance(event, RawContentBlockStopEvent):
                    current = blocks.get(event.index)
                    if current is not None and current.kind == "tool_use":
                        yield FunctionCallEvent(current.call_id, current.name, current.arguments or current.start_input)
                elif isinstance(event, RawMessageDeltaEvent):
                    stop = event.delta.stop_reason or stop
                    _read_usage(usage, getattr(event, "usage", None))
                elif isinstance(event, RawMessageStopEvent):
                    ended = True
        kept = [block for block in (b.kept() for _, b in sorted(blocks.items())) if block is not None]
        if kept:
            yield Thinking(kept)
        if not ended:
            raise ModelError(f"the stream from the model API at {self.base_url} ended before the message was "
                             "complete (the connection was cut?)")
        if usage:
            yield _usage_event(usage)
        if stop in TRUNCATING_STOP_REASONS:
            yield Truncation(stop)


def _custom_header_names() -> list[str]:
    """The header names in ``$ANTHROPIC_CUSTOM_HEADERS`` (``Name: value`` lines), as the SDK reads them."""
    lines = (os.environ.get("ANTHROPIC_CUSTOM_HEADERS") or "").split("\n")
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def _read_usage(usage: dict[str, Any], reported: object, *skip: str) -> None:
    """Fold the usage a stream event reports into ``usage``, as it came (the loop checks it): ``message_delta``
    repeats and updates ``message_start``'s counts; a field it leaves out (or sends as ``null``) keeps its earlier
    value. ``skip``: fields not read (``message_start``'s ``output_tokens`` is a placeholder, 1)."""
    for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = getattr(reported, name, None)
        if value is not None and name not in skip:
            usage[name] = value


def _usage_event(usage: dict[str, Any]) -> UsageEvent:
    fresh, read, written = (usage.get(name, 0) for name in ("input_tokens", "cache_read_input_tokens",
                                                            "cache_creation_input_tokens"))
    total: Any = fresh + read + written if all(map(is_count, (fresh, read, written))) else None  # None: no count
    output: Any = usage.get("output_tokens")
    return UsageEvent(input_tokens=total, output_tokens=output, cache_read_tokens=read, cache_write_tokens=written)
