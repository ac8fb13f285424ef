"""OpenAI-compatible Chat Completions (vLLM, Ollama, llama.cpp, ...) as a streaming model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

from openai import omit
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam, ChatCompletionToolUnionParam
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from ..record.history import Item
from ..record.images import data_url
from ._openai_common import InputCache, OpenAIModelBase
from .base import (
    FunctionCallEvent,
    FunctionCallProgress,
    ModelError,
    ModelEvent,
    ModelRequest,
    Truncation,
    UsageEvent,
    reported,
    text_delta,
)


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses-shaped tool schemas in the Chat Completions shape ``{"type": "function", "function": {...}}``."""
    converted = []
    for tool in tools:
        if tool.get("type") != "function" or "function" in tool:
            converted.append(tool)
            continue
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        converted.append({"type": "function", "function": function})
    return converted


def _text(content: Any) -> str:
    """Message content as plain text (Responses content parts are joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def chat_messages(system: str, history: list[Item]) -> list[dict[str, Any]]:
    """The history as chat messages, the system prompt first (see :func:`add_chat_message`)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for item in history:
        add_chat_message(messages, item)
    return messages


def add_chat_message(messages: list[dict[str, Any]], item: Item) -> None:
    """Append a history item to chat messages.

    A run of ``function_call`` items becomes one assistant message with ``tool_calls`` (its content is the
    assistant text just before the calls, else ``""``); each ``function_call_output`` becomes a ``tool`` message.
    Tool messages take text only, so the ``images`` of a round's outputs go into one ``user`` message after the
    round's tool messages: per call, a text part naming it, then its ``image_url`` parts.
    """
    kind = item.get("type")
    if kind == "function_call":
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            if "tool_calls" not in last:
                last["content"] = last.get("content") or ""
                last["tool_calls"] = []
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        message = {"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))}
        images = messages.pop() if messages and _is_images_message(messages[-1]) else None
        messages.append(message)  # before the round's images: tool messages must follow their calls directly
        if item.get("images"):
            images = images or {"role": "user", "content": []}
            images["content"].append({"type": "text", "text": f"The images of tool call {item['call_id']}:"})
            images["content"].extend({"type": "image_url", "image_url": {"url": data_url(image)}}
                                     for image in item["images"])
        if images is not None:
            messages.append(images)
    elif kind == "message" or "role" in item:
        messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})


def _is_images_message(message: dict[str, Any]) -> bool:
    # The only user message with a list of parts: a prompt from the history is converted to a string.
    return message["role"] == "user" and isinstance(message.get("content"), list)


@dataclass
class _PartialCall:
    call_id: str
    name: str
    arguments: str


TRUNCATING_FINISH_REASONS = ("length", "content_filter")


class OpenAIChatModel(OpenAIModelBase):
    """Streams answers from a Chat Completions endpoint: OpenAI itself or an OpenAI-compatible server.

    ``OpenAIChatModel("qwen3", base_url="http://localhost:11434/v1")`` talks to a local server, which gets no
    key unless ``api_key`` or ``api_key_env`` names one (see
    :class:`~agentkernel.models._openai_common.OpenAIModelBase`). Tool calls are gathered by their ``index``
    across chunks (a :class:`FunctionCallProgress` per chunk that grows one) and emitted once the stream has
    finished; usage comes from the final chunk (``stream_options={"include_usage": True}``); a
    ``finish_reason`` of ``length`` or ``content_filter`` ends the response with a :class:`Truncation`.
    ``max_output_tokens`` is sent as ``max_completion_tokens`` to the OpenAI API (which rejects ``max_tokens``
    for reasoning models) and as ``max_tokens`` to other servers (the field all of them take).
    """

    def __init__(self, model: str, **options: Any):
        super().__init__(model, **options)
        self._messages = InputCache(add_chat_message)

    @property
    def output_cap_field(self) -> str:
        """The request field that carries ``max_output_tokens``."""
        return "max_completion_tokens" if self.is_openai_api else "max_tokens"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        messages = self._messages.convert(request.history)
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        opening = self.client.chat.completions.create(
            model=self.model,
            messages=cast(list[ChatCompletionMessageParam], messages),
            tools=cast(list[ChatCompletionToolUnionParam], chat_tools(request.tools)) if request.tools else omit,
            stream=True,
            stream_options={"include_usage": True},
            **self.sampling_options(self.output_cap_field, request),
        )
        calls: dict[int, _PartialCall] = {}
        usage: object = None
        finish: str | None = None
        async with self._api_stream(opening) as chunks:
            async for chunk in chunks:
                if not isinstance(chunk, ChatCompletionChunk):
                    continue
                usage = chunk.usage or usage
                for choice in chunk.choices or []:
                    delta = choice.delta
                    if delta is not None and delta.content:
                        yield text_delta(delta.content)
                    grown = {_add_piece(calls, piece) for piece in (delta.tool_calls if delta else None) or []}
                    for call in (calls[index] for index in sorted(grown)):
                        if call.name:
                            yield FunctionCallProgress(call.call_id, call.name, len(call.arguments))
                    finish = choice.finish_reason or finish
        if finish is None:
            raise ModelError(f"the stream from the model API at {self.base_url} ended before the model "
                             "finished its answer (the connection was cut?)")
        for index in sorted(calls):
            call = calls[index]
            yield FunctionCallEvent(call_id=call.call_id, name=call.name, arguments=call.arguments)
        if usage is not None:
            yield _usage(usage)
        if finish in TRUNCATING_FINISH_REASONS:
            yield Truncation(finish)


def _add_piece(calls: dict[int, _PartialCall], piece: ChoiceDeltaToolCall) -> int:
    """Fold one streamed tool-call fragment into the call at its index (id and name come first); return the index."""
    index: int | None = piece.index
    if index is None:  # some servers omit it: a fragment with an id starts a new call
        index = len(calls) if piece.id or not calls else max(calls)
    function = piece.function
    call = calls.get(index)
    if call is None:
        call = calls[index] = _PartialCall(piece.id or f"call_{uuid.uuid4().hex[:24]}", "", "")
    if function is not None:
        call.name = call.name or function.name or ""
        call.arguments += function.arguments or ""
    return index


def _usage(usage: object) -> UsageEvent:
    prompt, completion = reported(usage, "prompt_tokens_details"), reported(usage, "completion_tokens_details")
    return UsageEvent(input_tokens=reported(usage, "prompt_tokens"), output_tokens=reported(usage, "completion_tokens"),
                      cache_read_tokens=reported(prompt, "cached_tokens", 0),
                      reasoning_tokens=reported(completion, "reasoning_tokens", 0))
