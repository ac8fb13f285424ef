"""Compaction against a real HTTP server that enforces a context window, through the real openai SDK.

:class:`openai_server.WindowServer` counts tokens its own way (bytes of the JSON body / 3.5), reports them in
``usage`` and refuses a request that does not fit exactly as OpenAI, llama.cpp or vLLM do. The model it plays calls
``read_chunk`` (1.5-2 KB outputs) round after round, then answers; compaction's summary requests get a note.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_server import Answer, ScriptedServer, WindowServer
from runtime_helpers import outputs, run_sync
from test_context import chunk_text, read_chunk

from agentkernel import OpenAIChatModel, OpenAIResponsesModel, validate_history
from agentkernel.record.context import SUMMARY_INSTRUCTION


def last_text(body: dict[str, Any]) -> str:
    items = body.get("messages") or body.get("input") or []
    last = items[-1] if items else {}
    content = last.get("content") if isinstance(last, dict) else ""
    return content if isinstance(content, str) else json.dumps(content)


def reader(rounds: int):
    """The server's model: one read_chunk call per turn (chunk n on the n-th turn), then an answer."""
    turns = {"n": 0}

    def reply(body: dict[str, Any], prompt_tokens: int) -> Answer:
        if last_text(body) == SUMMARY_INSTRUCTION:
            return Answer([f"Task: read the chunks.\nDone and found: chunks 0 to {turns['n'] - 1}.\n"
                           f"Left to do: chunks {turns['n']} to {rounds - 1}."])
        n = turns["n"]
        if n >= rounds:
            return Answer(["I read all of them."])
        turns["n"] += 1
        return Answer([], [(f"call_{n}", "read_chunk", json.dumps({"n": n}))])
    return reply


def model_for(api: str, server: WindowServer):
    cls = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return cls("test-model", base_url=server.url, max_retries=0)


def check_run(server: WindowServer, result: Any, rounds: int) -> None:
    assert result.status == "complete", result.summary
    answered = [m for m in server.measured if not m.refused]
    assert all(m.prompt_tokens <= server.window for m in answered)  # every request that was answered fit
    assert all(m.problems() == [] for m in server.measured)  # and every request was a valid history
    assert [o["output"] for o in outputs(result.history)] == [chunk_text(i) for i in range(rounds)]
    validate_history(result.history)
    assert result.compactions > 0


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_200_round_run_in_an_8000_token_window_completes_and_keeps_every_output(api):
    with WindowServer(window=8000, overflow="openai", reply=reader(200)) as server:
        result = run_sync("Read chunks 0 to 199.", model=model_for(api, server), tools=[read_chunk],
                          context_window=8000)
    check_run(server, result, 200)
    assert server.refused() == []  # the window was known: no request was ever refused


class Unsaid(WindowServer):
    """A server that does not say its window before a refusal (no /props, no window in /v1/models)."""

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return ScriptedServer.get(self, path)


@pytest.mark.parametrize(("overflow", "api", "rounds"), [
    ("openai", "chat", 200), ("openai", "responses", 80), ("llamacpp", "chat", 80), ("vllm", "chat", 80),
    ("openai_sse_error", "responses", 80), ("openai_response_failed", "responses", 80)])
def test_the_window_unknown_is_learned_from_the_first_overflow_error(overflow, api, rounds):
    with Unsaid(window=8000, overflow=overflow, reply=reader(rounds)) as server:
        result = run_sync(f"Read chunks 0 to {rounds - 1}.", model=model_for(api, server), tools=[read_chunk])
    check_run(server, result, rounds)
    refused = len(server.refused())
    # Learned at the first refusal; OpenAI's Responses refusals name no numbers: the guess may take two more.
    assert 1 <= refused <= (3 if api == "responses" else 1), refused


def test_llama_cpp_props_give_the_window_before_the_first_request():
    with WindowServer(window=6000, overflow="llamacpp", reply=reader(60)) as server:
        result = run_sync("Read chunks 0 to 59.", model=model_for("chat", server), tools=[read_chunk])
    check_run(server, result, 60)
    assert server.refused() == []


def test_vllm_models_endpoint_gives_the_window_before_the_first_request():
    with WindowServer(window=6000, overflow="vllm", reply=reader(60)) as server:
        result = run_sync("Read chunks 0 to 59.", model=model_for("chat", server), tools=[read_chunk])
    check_run(server, result, 60)
    assert server.refused() == []


def test_a_request_that_cannot_fit_ends_context_overflow_quickly_on_every_server():
    for overflow in ("openai", "llamacpp", "vllm"):
        with WindowServer(window=300, overflow=overflow, props=False) as server:
            result = run_sync("word " * 3000, model=model_for("chat", server), tools=[read_chunk])
        assert result.status == "context_overflow", (overflow, result.summary)
        assert len(server.measured) <= 3 and "tokens" in result.detail
        validate_history(result.history)
