"""Fault injection on model streams: a server that sends data no adapter can read ends the run as ``fatal_error``
with a short message and a valid history, never with an exception out of ``run()``.

Each case goes through the real openai SDK to the loopback server, for both adapters.
"""

from __future__ import annotations

import asyncio

import pytest
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_chunk, chat_events, lookup_tool, responses_events

from agentkernel import OpenAIChatModel, OpenAIResponsesModel, run, validate_history
from agentkernel.models import RecordingModel, ReplayModel

ADAPTERS = {"responses": OpenAIResponsesModel, "chat": OpenAIChatModel}


def good_start(api: str) -> list[str]:
    """The first events of a normal answer, before the fault."""
    return responses_events(["Hello"], complete=False) if api == "responses" else chat_events(["Hello"])[:2]


def run_against(api: str, *replies: Reply, **options):
    with ScriptedServer(*replies) as server:
        model = ADAPTERS[api]("test-model", base_url=server.url, api_key=TEST_KEY, max_retries=0)
        return asyncio.run(run("hi", model=model, **options)), server


BAD_DATA = {
    "not JSON": "data: {this is not json\n\n",
    "a bare word": "data: oops\n\n",
    "JSON but not an object": "data: 42\n\n",
    "an object of the wrong shape": 'data: {"type": "response.output_text.delta", "choices": "x", "delta": 7}\n\n',
}


@pytest.mark.parametrize("bad", list(BAD_DATA))
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_unreadable_stream_data_ends_the_run_as_fatal_error(api, bad):
    result, _ = run_against(api, Reply(good_start(api) + [BAD_DATA[bad]] + good_start(api)))
    assert result.status == "fatal_error", result.summary
    assert result.detail.startswith("the ")  # a sentence of ours, not a raw exception's text
    assert len(result.detail) < 300 and "Traceback" not in result.detail
    validate_history(result.history)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_line_that_is_not_json_is_named_in_the_message(api):
    result, server = run_against(api, Reply(good_start(api) + ["data: {this is not json\n\n"]))
    assert result.status == "fatal_error"
    assert f"the model API at {server.url} sent stream data that is not JSON: '{{this is not json'" in result.detail


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_unreadable_data_after_tool_rounds_keeps_the_history_valid(api):
    if api == "responses":
        first = Reply(responses_events([], [("call_1", "lookup", '{"word": "cat"}')]))
    else:
        first = Reply(chat_events([], [("call_1", "lookup", ['{"word": "cat"}'])]))
    result, _ = run_against(api, first, Reply(good_start(api) + ["data: <html>\n\n"]), tools=[lookup_tool()])
    assert result.status == "fatal_error" and "not JSON" in result.detail
    assert result.tool_calls == 1 and result.history[-1]["output"] == "cat means something"
    validate_history(result.history)


def test_a_chat_chunk_with_a_broken_tool_call_fragment_is_a_fatal_error():
    broken = chat_chunk({"tool_calls": [{"index": "zero", "function": {"arguments": 5}}]})
    result, _ = run_against("chat", Reply(chat_events(["Hi"])[:2] + [broken] + chat_events()[-3:]))
    assert result.status == "fatal_error" and "cannot read" in result.detail
    validate_history(result.history)


def test_a_key_in_unreadable_data_is_not_shown(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    result, _ = run_against("chat", Reply(chat_events(["Hi"])[:2] + [f"data: leaked {TEST_KEY}\n\n"]))
    assert result.status == "fatal_error" and TEST_KEY not in result.detail
    assert "[secret $OPENAI_API_KEY]" in result.detail


def test_a_recording_of_a_faulty_stream_replays_as_the_same_error(tmp_path):
    cassette = tmp_path / "fault.jsonl"
    with ScriptedServer(Reply(good_start("chat") + ["data: nope\n\n"])) as server:
        live = OpenAIChatModel("test-model", base_url=server.url, api_key=TEST_KEY, max_retries=0)
        recorded = asyncio.run(run("hi", model=RecordingModel(live, cassette)))
    replayed = asyncio.run(run("hi", model=ReplayModel(cassette)))
    assert recorded.status == replayed.status == "fatal_error" and replayed.detail == recorded.detail

