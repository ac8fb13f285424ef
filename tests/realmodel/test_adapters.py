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

from agentkernel import GuardConfig, Limits, LoopResult, StopSignal, run, validate_history
from agentkernel.events import Event, ToolCallStarted
from agentkernel.models import OpenAIChatModel, OpenAIResponsesModel
from agentkernel.models.base import FunctionCallProgress, TextDelta

pytestmark = pytest.mark.realmodel

NO_TEXT_LOOP = GuardConfig(text_repeats=0)
"""The ramble repeats itself, which the text-loop guard would cut first; these runs are about Stop and the caps."""


def calls_and_outputs(result: LoopResult) -> list[tuple[str, str]]:
    """(tool name, its output) for every function call of the run, matched by call id."""
    outputs = {item["call_id"]: item["output"] for item in result.history if item["type"] == "function_call_output"}
    return [(item["name"], outputs[item["call_id"]]) for item in result.history if item["type"] == "function_call"]


def test_chat_run_with_a_real_tool_call_completes(idle_llama: LlamaServer):
    model = OpenAIChatModel(MODEL_NAME, base_url=idle_llama.api_url)
    seen: list[Event] = []
    result = asyncio.run(run(CALL_PROMPT, model=model, tools=[secret_word_tool()], system=SYSTEM,
                             on_event=seen.append, limits=Limits(max_seconds=240)))
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
    # the panel heard of the call while the server was still streaming it
    progress = [e for e in seen if isinstance(e, FunctionCallProgress)]
    first_start = next(i for i, e in enumerate(seen) if isinstance(e, ToolCallStarted))
    assert progress and {e.name for e in progress} == {"secret_word"}
    assert seen.index(progress[0]) < first_start


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
                             guards=NO_TEXT_LOOP, on_event=on_event, limits=Limits(max_seconds=240)))
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



def test_an_output_cap_ends_a_chat_run_truncated(idle_llama: LlamaServer):
    """``max_output_tokens`` reaches the server, which stops there and says why (``length``): ``truncated``."""
    model = OpenAIChatModel(MODEL_NAME, base_url=idle_llama.api_url, max_output_tokens=5)
    result = asyncio.run(run(RAMBLE_PROMPT, model=model, tools=[secret_word_tool()], system=SYSTEM,
                             guards=NO_TEXT_LOOP, limits=Limits(max_seconds=120)))
    print(result.summary)
    assert result.status == "truncated", result.summary
    assert "(length)" in result.detail
    assert result.rounds == 1 and result.tool_calls == 0
    assert 0 < result.usage.output_tokens <= 5
    validate_history(result.history)


def test_an_output_cap_reaches_the_responses_endpoint(idle_llama: LlamaServer):
    """The cap is honoured; but llama-server's ``/v1/responses`` ends a capped response with ``response.completed``
    (status ``completed``, no ``incomplete_details``), not ``response.incomplete``, so the run cannot tell it was
    cut short. Only the cap is asserted here."""
    model = OpenAIResponsesModel(MODEL_NAME, base_url=idle_llama.api_url, max_output_tokens=5)
    result = asyncio.run(run(RAMBLE_PROMPT, model=model, system=SYSTEM, guards=NO_TEXT_LOOP,
                             limits=Limits(max_seconds=120)))
    print(result.summary)
    assert result.status in ("complete", "truncated"), result.summary
    assert 0 < result.usage.output_tokens <= 5
    validate_history(result.history)
