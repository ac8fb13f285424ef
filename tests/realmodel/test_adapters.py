"""The OpenAI adapters against llama.cpp's server and a real small model, through the real ``openai`` SDK.

What is asserted holds for any model that makes the call it is asked for: statuses, the history invariant,
tool outputs matched by call id, usage reported, and that Stop cancels the server's generation. The tiny model's
wording is never checked.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from llama_server import MODEL_NAME, LlamaServer
from realmodel_support import CALL_PROMPT, RAMBLE_PROMPT, SECRET, SYSTEM, assert_generation_cancelled, secret_word_tool

from agentkernel import Limits, LoopResult, StopSignal, run, validate_history
from agentkernel.events import Event
from agentkernel.models import OpenAIChatModel, OpenAIResponsesModel
from agentkernel.models.base import TextDelta

pytestmark = pytest.mark.realmodel


def calls_and_outputs(result: LoopResult) -> list[tuple[str, str]]:
    """(tool name, its output) for every function call of the run, matched by call id."""
    outputs = {item["call_id"]: item["output"] for item in result.history if item["type"] == "function_call_output"}
    return [(item["name"], outputs[item["call_id"]]) for item in result.history if item["type"] == "function_call"]


def test_chat_run_with_a_real_tool_call_completes(idle_llama: LlamaServer):
    model = OpenAIChatModel(MODEL_NAME, base_url=idle_llama.api_url)
    result = asyncio.run(run(CALL_PROMPT, model=model, tools=[secret_word_tool()], system=SYSTEM,
                             limits=Limits(max_seconds=240)))
    print(result.summary)
    assert result.status == "complete", result.summary
    validate_history(result.history)
    calls = calls_and_outputs(result)
    assert calls and set(calls) == {("secret_word", SECRET)}
    assert result.tool_calls == len(calls) and result.rounds >= 2
    assert isinstance(result.answer, str) and result.answer.strip()
    assert result.history[-1]["role"] == "assistant"
    assert result.usage.requests == result.rounds
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


def test_stop_during_generation_cancels_it_on_the_server(idle_llama: LlamaServer):
    """After Stop the server's one slot is free at once: its next request does not wait for the old generation."""
    stop = StopSignal()
    seen: dict[str, float | bool] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, TextDelta) and "stopped_at" not in seen:
            seen["busy"] = idle_llama.busy()  # the model is still writing (it would go on for minutes)
            seen["stopped_at"] = time.monotonic()
            stop.set("stopped by the test")

    model = OpenAIChatModel(MODEL_NAME, base_url=idle_llama.api_url)
    result = asyncio.run(run(RAMBLE_PROMPT, model=model, tools=[secret_word_tool()], system=SYSTEM, stop=stop,
                             on_event=on_event, limits=Limits(max_seconds=240)))
    returned = time.monotonic() - seen["stopped_at"]
    assert seen["busy"] is True
    assert result.status == "aborted", result.summary
    validate_history(result.history)
    print(f"the run returned {returned:.2f} s after Stop")
    assert returned < 2
    assert_generation_cancelled(idle_llama, "Stop")


def test_responses_api_text_answer(idle_llama: LlamaServer):
    model = OpenAIResponsesModel(MODEL_NAME, base_url=idle_llama.api_url)
    result = asyncio.run(run("Say hello in one short sentence.", model=model, system=SYSTEM,
                             limits=Limits(max_seconds=120)))
    print(result.summary)
    assert result.status == "complete", result.summary
    validate_history(result.history)
    assert isinstance(result.answer, str) and result.answer.strip()
    assert result.history[-1]["role"] == "assistant" and result.tool_calls == 0
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
