"""The Anthropic Messages adapter against llama.cpp's own ``/v1/messages`` endpoint and a real small model, through
the real ``anthropic`` SDK: a tool call, its result, an answer; and Stop mid-stream cancelling the generation.

The model is named by its provider string with llama.cpp's ``/v1`` URL, as a user would write
``%%agent -m anthropic:NAME --base-url http://127.0.0.1:PORT/v1`` (the adapter takes the server's root). The tiny
model's wording is never checked.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from llama_server import MODEL_NAME, LlamaServer
from realmodel_support import CALL_PROMPT, RAMBLE_PROMPT, SECRET, SYSTEM, assert_generation_cancelled, secret_word_tool

from agentkernel import GuardConfig, Limits, StopSignal, run, validate_history
from agentkernel.events import Event
from agentkernel.models.base import TextDelta
from agentkernel.models.providers import resolve

pytestmark = pytest.mark.realmodel


def anthropic_model(server: LlamaServer):
    model = resolve(f"anthropic:{MODEL_NAME}", base_url=server.api_url).model_object()
    assert model.base_url == server.url  # the root: the SDK adds /v1/messages
    return model


def test_a_tool_call_its_result_and_an_answer(idle_llama: LlamaServer):
    result = asyncio.run(run(CALL_PROMPT, model=anthropic_model(idle_llama), tools=[secret_word_tool()],
                             system=SYSTEM, limits=Limits(max_seconds=240, max_iterations=4)))
    print(result.summary)
    assert result.status == "complete", result.summary
    validate_history(result.history)
    outputs = {i["call_id"]: i["output"] for i in result.history if i["type"] == "function_call_output"}
    calls = [(i["name"], outputs[i["call_id"]]) for i in result.history if i["type"] == "function_call"]
    assert calls and set(calls) == {("secret_word", SECRET)}
    assert result.rounds >= 2 and isinstance(result.answer, str) and result.answer.strip()
    assert result.usage.requests == result.rounds
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


def test_stop_mid_stream_cancels_the_generation(idle_llama: LlamaServer):
    stop = StopSignal()
    seen: dict[str, float | bool] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, TextDelta) and "stopped_at" not in seen:
            seen["busy"] = idle_llama.busy()
            seen["stopped_at"] = time.monotonic()
            stop.set("stopped by the test")

    result = asyncio.run(run(RAMBLE_PROMPT, model=anthropic_model(idle_llama), tools=[secret_word_tool()],
                             system=SYSTEM, stop=stop, guards=GuardConfig(text_repeats=0), on_event=on_event,
                             limits=Limits(max_seconds=240)))
    assert seen.get("busy") is True, result.summary
    assert result.status == "aborted", result.summary
    validate_history(result.history)
    returned = time.monotonic() - float(seen["stopped_at"])
    print(f"the run returned {returned:.2f} s after Stop")
    assert returned < 2
    assert_generation_cancelled(idle_llama, "Stop")
