"""The OpenAI Responses API as a streaming :class:`~agentkernel.models.base.Model`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, cast

from openai import omit
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInputParam,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ToolParam,
)

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

_ITEM_KEYS = {
    "message": ("type", "role", "content"),
    "function_call": ("type", "call_id", "name", "arguments"),
    "function_call_output": ("type", "call_id", "output"),
}


def responses_item(item: Item) -> dict[str, Any]:
    """A history item as a Responses ``input`` item, without the runtime's own keys (such as ``synthetic``).

    A tool output with ``images`` is sent as a list: its text as ``input_text``, then each image as an
    ``input_image`` (a data URL), the form ``FunctionCallOutput.output`` takes for "text, image, or file output".
    """
    keys = _ITEM_KEYS.get(item.get("type", ""))
    if keys is None:  # an item type the runtime does not make itself: pass it on as it is
        return {k: v for k, v in item.items() if k not in ("synthetic", "images")}
    converted = {k: item[k] for k in keys if k in item}
    if item.get("images") and converted["type"] == "function_call_output":
        converted["output"] = [{"type": "input_text", "text": item.get("output") or ""},
                               *({"type": "input_image", "image_url": data_url(image)} for image in item["images"])]
    return converted


def responses_input(history: list[Item]) -> list[dict[str, Any]]:
    """The history as Responses ``input`` items."""
    return [responses_item(item) for item in history]


class OpenAIResponsesModel(OpenAIModelBase):
    """Streams answers from the OpenAI Responses API (``client.responses.create(stream=True)``).

    ``OpenAIResponsesModel("gpt-4.1-mini")`` reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; ``base_url``,
    ``api_key`` / ``api_key_env``, ``max_output_tokens`` and ``temperature`` are described on
    :class:`~agentkernel.models._openai_common.OpenAIModelBase`, and ``client`` supplies a ready
    ``openai.AsyncOpenAI``. The SDK retries ``max_retries`` times on connection errors, 408/409/429 and 5xx before
    the error becomes a :class:`ModelError`, as do a refused key, a failed response and a stream that ends before
    ``response.completed``. ``response.incomplete`` ends the response with a :class:`Truncation`.
    """

    def __init__(self, model: str, **options: Any):
        super().__init__(model, **options)
        self._input = InputCache(lambda converted, item: converted.append(responses_item(item)))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        opening = self.client.responses.create(
            model=self.model,
            input=cast(ResponseInputParam, self._input.convert(request.history)),
            instructions=request.system or omit,
            tools=cast(list[ToolParam], request.tools) if request.tools else omit,
            stream=True,
            **self.sampling_options("max_output_tokens", request),
        )
        writing: dict[str, ResponseFunctionToolCall] = {}  # calls still being written, by item id
        ended = False
        async with self._api_stream(opening) as events:
            async for event in events:
                if isinstance(event, ResponseTextDeltaEvent):
                    yield text_delta(event.delta)
                elif isinstance(event, ResponseFunctionCallArgumentsDeltaEvent):
                    if (call := writing.get(event.item_id)) is not None:
                        call.arguments += event.delta
                        yield FunctionCallProgress(call.call_id, call.name, len(call.arguments))
                elif isinstance(event, ResponseOutputItemAddedEvent | ResponseOutputItemDoneEvent):
                    item = event.item
                    if not isinstance(item, ResponseFunctionToolCall):
                        continue
                    if isinstance(event, ResponseOutputItemAddedEvent):
                        writing[item.id or item.call_id] = item.model_copy()
                        yield FunctionCallProgress(item.call_id, item.name, len(item.arguments or ""))
                    else:
                        writing.pop(item.id or item.call_id, None)
                        yield FunctionCallEvent(call_id=item.call_id, name=item.name, arguments=item.arguments or "")
                elif isinstance(event, ResponseCompletedEvent | ResponseIncompleteEvent):
                    ended = True
                    if event.response.usage is not None:  # none (``null``): the loop estimates it
                        yield _usage(event.response.usage)
                    if isinstance(event, ResponseIncompleteEvent):
                        for call in writing.values():  # cut while being written: recorded, never run
                            yield FunctionCallEvent(call_id=call.call_id, name=call.name, arguments=call.arguments)
                        details = event.response.incomplete_details
                        yield Truncation((details.reason if details else None) or "incomplete")
                elif isinstance(event, ResponseFailedEvent):
                    error = event.response.error
                    text = error.message if error else "no details"
                    message = f"the model API reported a failed response: {text}"
                    raise self.api_error(message, {"code": error.code, "message": text} if error else {})
                elif isinstance(event, ResponseErrorEvent):
                    raise self.api_error(f"the model API reported an error: {event.message}",
                                         {"code": event.code, "message": event.message})
        if not ended:
            raise ModelError(f"the stream from the model API at {self.base_url} ended before the response "
                             "was complete (the connection was cut?)")


def _usage(usage: object) -> UsageEvent:
    details, output = reported(usage, "input_tokens_details"), reported(usage, "output_tokens_details")
    return UsageEvent(input_tokens=reported(usage, "input_tokens"), output_tokens=reported(usage, "output_tokens"),
                      cache_read_tokens=reported(details, "cached_tokens", 0),
                      reasoning_tokens=reported(output, "reasoning_tokens", 0))
