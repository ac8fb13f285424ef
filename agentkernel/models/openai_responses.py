"""The OpenAI Responses API as a streaming :class:`~agentkernel.models.base.Model`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from ..history import Item
from ._openai_common import OpenAIModelBase
from .base import FunctionCallEvent, ModelError, ModelEvent, ModelRequest, TextDelta, UsageEvent

_ITEM_KEYS = {
    "message": ("type", "role", "content"),
    "function_call": ("type", "call_id", "name", "arguments"),
    "function_call_output": ("type", "call_id", "output"),
}


def responses_input(history: list[Item]) -> list[dict[str, Any]]:
    """The history as Responses ``input`` items, without the runtime's own keys (such as ``synthetic``)."""
    items = []
    for item in history:
        keys = _ITEM_KEYS.get(item.get("type", ""))
        if keys is None:  # an item type the runtime does not make itself: pass it on as it is
            items.append({k: v for k, v in item.items() if k != "synthetic"})
        else:
            items.append({k: item[k] for k in keys if k in item})
    return items


class OpenAIResponsesModel(OpenAIModelBase):
    """Streams answers from the OpenAI Responses API (``client.responses.create(stream=True)``).

    ``OpenAIResponsesModel("gpt-4.1-mini")`` reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` through the SDK;
    ``base_url``/``api_key`` override them and ``client`` supplies a ready ``openai.AsyncOpenAI``. The SDK
    retries ``max_retries`` times on connection errors, 408/409/429 and 5xx before the error becomes a
    :class:`ModelError`, as do a refused key, a failed response and a stream that ends before
    ``response.completed``.
    """

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        options: dict[str, Any] = {}
        if request.system:
            options["instructions"] = request.system
        if request.tools:
            options["tools"] = request.tools
        opening = self.client.responses.create(
            model=self.model, input=responses_input(request.history), stream=True, **options
        )
        completed = False
        async with self._api_stream(opening) as events:
            async for event in events:
                kind = getattr(event, "type", None)
                if kind == "response.output_text.delta":
                    yield TextDelta(event.delta)
                elif kind == "response.output_item.done" and getattr(event.item, "type", None) == "function_call":
                    item = event.item
                    yield FunctionCallEvent(call_id=item.call_id, name=item.name, arguments=item.arguments or "")
                elif kind in ("response.completed", "response.incomplete"):  # incomplete: cut at a token limit
                    usage = getattr(event.response, "usage", None)
                    yield UsageEvent(input_tokens=getattr(usage, "input_tokens", 0) or 0,
                                     output_tokens=getattr(usage, "output_tokens", 0) or 0)
                    completed = True
                elif kind == "response.failed":
                    error = getattr(event.response, "error", None)
                    raise ModelError(self._redact(
                        f"the model API reported a failed response: {getattr(error, 'message', None) or error}"))
                elif kind == "error":
                    raise ModelError(self._redact(f"the model API reported an error: {event.message}"))
        if not completed:
            raise ModelError(f"the stream from the model API at {self.base_url} ended before the response "
                             "was complete (the connection was cut?)")
