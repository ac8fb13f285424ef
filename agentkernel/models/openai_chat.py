"""OpenAI-compatible Chat Completions (vLLM, Ollama, llama.cpp, ...) as a streaming model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from ..history import Item
from ._openai_common import OpenAIModelBase
from .base import FunctionCallEvent, ModelError, ModelEvent, ModelRequest, TextDelta, UsageEvent


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
    """The history as chat messages.

    The system prompt comes first; a run of ``function_call`` items becomes one assistant message with
    ``tool_calls`` (its content is the assistant text just before the calls, else ``""``); each
    ``function_call_output`` becomes a ``tool`` message.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for item in history:
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
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))})
        elif kind == "message" or "role" in item:
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
    return messages


@dataclass
class _PartialCall:
    call_id: str
    name: str
    arguments: str


class OpenAIChatModel(OpenAIModelBase):
    """Streams answers from a Chat Completions endpoint: OpenAI itself or an OpenAI-compatible server.

    ``OpenAIChatModel("qwen3", base_url="http://localhost:11434/v1")`` talks to a local server; with a base
    URL and no key configured, a placeholder key is sent (local servers ignore it). Tool calls are gathered
    by their ``index`` across chunks and emitted once the stream has finished; usage comes from the final
    chunk (``stream_options={"include_usage": True}``). Errors become :class:`ModelError` as for
    :class:`~agentkernel.models.openai_responses.OpenAIResponsesModel`.
    """

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        options: dict[str, Any] = {}
        if request.tools:
            options["tools"] = chat_tools(request.tools)
        opening = self.client.chat.completions.create(
            model=self.model, messages=chat_messages(request.system, request.history), stream=True,
            stream_options={"include_usage": True}, **options,
        )
        calls: dict[int, _PartialCall] = {}
        usage: Any = None
        finished = False
        async with self._api_stream(opening) as chunks:
            async for chunk in chunks:
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or []:
                    delta = choice.delta
                    if delta is not None and delta.content:
                        yield TextDelta(delta.content)
                    for piece in (delta.tool_calls if delta is not None else None) or []:
                        _add_piece(calls, piece)
                    if choice.finish_reason:
                        finished = True
        if not finished:
            raise ModelError(f"the stream from the model API at {self.base_url} ended before the model "
                             "finished its answer (the connection was cut?)")
        for index in sorted(calls):
            call = calls[index]
            yield FunctionCallEvent(call_id=call.call_id, name=call.name, arguments=call.arguments)
        if usage is not None:
            yield UsageEvent(input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                             output_tokens=getattr(usage, "completion_tokens", 0) or 0)


def _add_piece(calls: dict[int, _PartialCall], piece: Any) -> None:
    """Fold one streamed tool-call fragment into the call at its index (id and name come first)."""
    index = piece.index
    if index is None:  # some servers omit it: a fragment with an id starts a new call
        index = len(calls) if piece.id or not calls else max(calls)
    function = piece.function
    call = calls.get(index)
    if call is None:
        call = calls[index] = _PartialCall(piece.id or f"call_{uuid.uuid4().hex[:24]}", "", "")
    if function is not None:
        call.name = call.name or function.name or ""
        call.arguments += function.arguments or ""
