"""Prompt-cache usage as llama.cpp's server reports it, through both adapters and the real ``openai`` SDK.

llama.cpp keeps the last prompt's evaluation and reports the tokens it reused as ``cached_tokens`` (Chat
``prompt_tokens_details``, Responses ``input_tokens_details``), as OpenAI does; a run that goes on from the one
before therefore reads nearly all of its prompt from the cache. ``Price(0, 0)`` (``--price 0``) prices the local
server as free.
"""

from __future__ import annotations

import asyncio

import pytest
from llama_server import MODEL_NAME, LlamaServer
from realmodel_support import SYSTEM

from agentkernel import Limits, OpenAIChatModel, OpenAIResponsesModel, Price, run

pytestmark = pytest.mark.realmodel


@pytest.mark.parametrize("adapter", [OpenAIChatModel, OpenAIResponsesModel], ids=["chat", "responses"])
def test_a_run_that_goes_on_reads_its_prefix_from_llama_cpps_cache(idle_llama: LlamaServer, adapter: type):
    model = adapter(MODEL_NAME, base_url=idle_llama.api_url, max_output_tokens=16)
    system = SYSTEM + " Background: " + "the notebook holds sales figures by region and month. " * 20
    once = {"model": model, "system": system, "limits": Limits(max_iterations=1, max_seconds=120),
            "price": Price(0, 0)}
    first = asyncio.run(run("Say hello.", **once))
    history = [*first.history, {"type": "message", "role": "user", "content": "Say it again."}]
    second = asyncio.run(run(None, history=history, **once))
    print(first.usage.line, "|", second.usage.line)
    assert first.usage.input_tokens > 150 and first.usage.cost == 0.0
    # Everything but the new turn was evaluated before: the server says it reused it.
    assert second.usage.cache_read_tokens >= 0.8 * first.usage.input_tokens
    assert second.usage.cache_read_tokens < second.usage.input_tokens
    assert second.usage.line.startswith(f"{second.usage.input_tokens:,} in ({second.usage.cache_read_tokens:,} cached)")
