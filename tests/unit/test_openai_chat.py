"""OpenAIChatModel through the real openai SDK against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from openai_server import (
    TEST_KEY,
    Reply,
    ScriptedServer,
    chat_chunk,
    chat_events,
    collect,
    lookup_tool,
    user_request,
    without_progress,
)

from agentkernel import StopSignal, run, validate_history
from agentkernel.models import (
    FunctionCallEvent,
    FunctionCallProgress,
    ModelError,
    OpenAIChatModel,
    TextDelta,
    UsageEvent,
)
from agentkernel.models.openai_chat import chat_messages, chat_tools


def model(server: ScriptedServer, **options) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.url, api_key=TEST_KEY, **options)


def test_streams_text_deltas_and_usage_from_the_final_chunk():
    with ScriptedServer(Reply(chat_events(["Hel", "lo"], usage=(11, 2)))) as server:
        events = asyncio.run(collect(model(server), user_request("say hello")))
    assert events == [TextDelta("Hel"), TextDelta("lo"), UsageEvent(11, 2)]
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["messages"] == [{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "say hello"}]
    assert "tools" not in sent.body


def test_parallel_tool_calls_are_gathered_by_index_across_chunks():
    calls = [("call_a", "lookup", ['{"wo', 'rd": ', '"a"}']), ("call_b", "lookup", ['{"word"', ': "b"}'])]
    tool = lookup_tool()
    with ScriptedServer(Reply(chat_events(["Let me look."], calls, usage=(5, 6)))) as server:
        events = asyncio.run(collect(model(server), user_request("define a and b", [tool.schema()])))
    assert without_progress(events) == [
        TextDelta("Let me look."),
        FunctionCallEvent("call_a", "lookup", '{"word": "a"}'),
        FunctionCallEvent("call_b", "lookup", '{"word": "b"}'),
        UsageEvent(5, 6),
    ]
    # While the calls stream, each chunk that grows one says so: the name at once, then the arguments' size.
    assert [e for e in events if isinstance(e, FunctionCallProgress)] == [
        FunctionCallProgress("call_a", "lookup", n) for n in (0, 4, 9, 13)
    ] + [FunctionCallProgress("call_b", "lookup", n) for n in (0, 7, 13)]
    first_call = events.index(FunctionCallEvent("call_a", "lookup", '{"word": "a"}'))
    assert all(isinstance(e, FunctionCallProgress) for e in events[1:first_call])
    assert server.requests[0].body["tools"] == [{"type": "function", "function": {
        "name": "lookup", "description": tool.description, "parameters": tool.parameters}}]


def test_interleaved_tool_call_chunks_are_matched_by_index():
    events = [
        chat_chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "c0", "type": "function", "function": {"name": "f", "arguments": ""}},
            {"index": 1, "id": "c1", "type": "function", "function": {"name": "g", "arguments": "{\"x\""}}]}),
        chat_chunk({"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chat_chunk({}, finish="tool_calls"),
        "data: [DONE]\n\n",  # this server sends no usage chunk
    ]
    with ScriptedServer(Reply(events)) as server:
        got = asyncio.run(collect(model(server), user_request()))
    assert without_progress(got) == [FunctionCallEvent("c0", "f", "{}"), FunctionCallEvent("c1", "g", '{"x": 1}')]
    assert got[:4] == [FunctionCallProgress("c0", "f", 0), FunctionCallProgress("c1", "g", 4),
                       FunctionCallProgress("c1", "g", 8), FunctionCallProgress("c0", "f", 2)]


def test_history_becomes_chat_messages():
    history = [
        {"type": "message", "role": "user", "content": "define cat and dog"},
        {"type": "message", "role": "assistant", "content": "Looking both up."},
        {"type": "function_call", "call_id": "a", "name": "lookup", "arguments": '{"word": "cat"}'},
        {"type": "function_call", "call_id": "b", "name": "lookup", "arguments": '{"word": "dog"}'},
        {"type": "function_call_output", "call_id": "a", "output": "cat means"},
        {"type": "function_call_output", "call_id": "b", "output": "aborted", "synthetic": True},
        {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": ""},
        {"type": "function_call_output", "call_id": "c", "output": "? means"},
        {"type": "message", "role": "assistant", "content": "Done."},
    ]
    assert chat_messages("sys", history) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "define cat and dog"},
        {"role": "assistant", "content": "Looking both up.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "cat"}'}},
            {"id": "b", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "dog"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "cat means"},
        {"role": "tool", "tool_call_id": "b", "content": "aborted"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "? means"},
        {"role": "assistant", "content": "Done."},
    ]
    assert chat_messages("", history[:1]) == [{"role": "user", "content": "define cat and dog"}]


def test_tools_are_converted_to_the_chat_shape():
    responses_shaped = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    chat_shaped = {"type": "function", "function": {"name": "g", "parameters": {}}}
    assert chat_tools([responses_shaped, chat_shaped]) == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},
        chat_shaped,
    ]


def test_a_500_is_retried_by_the_sdk_then_succeeds():
    error = Reply(status=500, body={"error": {"message": "warming up"}}, headers={"retry-after-ms": "1"})
    with ScriptedServer(error, Reply(chat_events(["ok"]))) as server:
        events = asyncio.run(collect(model(server, max_retries=1), user_request()))
    assert events[0] == TextDelta("ok")
    assert len(server.requests) == 2


def test_a_401_is_a_clear_model_error_without_the_key():
    refusal = Reply(status=401, body={"error": {"message": f"bad key {TEST_KEY}", "code": "invalid_api_key"}})
    with ScriptedServer(refusal) as server:
        with pytest.raises(ModelError, match=r"refused the key \(401 Unauthorized\)") as caught:
            asyncio.run(collect(model(server), user_request()))
    assert TEST_KEY not in str(caught.value)


def test_a_404_names_the_likely_cause():
    missing = Reply(status=404, body={"error": {"message": "model 'nope' not found"}})
    with ScriptedServer(missing) as server:
        with pytest.raises(ModelError, match=r"404 Not Found \(wrong model name or base URL\?\): model 'nope'"):
            asyncio.run(collect(model(server), user_request()))


def test_a_stream_cut_midway_is_a_model_error():
    with ScriptedServer(Reply(chat_events(["a", "b", "c"]), cut_after=3)) as server:
        with pytest.raises(ModelError, match="connection"):
            asyncio.run(collect(model(server, max_retries=0), user_request()))


def test_a_stream_that_ends_before_a_finish_reason_is_a_model_error():
    truncated = chat_events(["a", "b"], [("c1", "f", ['{"x"'])])[:4]
    with ScriptedServer(Reply(truncated)) as server:
        with pytest.raises(ModelError, match="ended before the model finished"):
            asyncio.run(collect(model(server), user_request()))


def test_a_local_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer(Reply(chat_events(["local"]))) as server:
        events = asyncio.run(collect(OpenAIChatModel("llama", base_url=server.url), user_request()))
    assert events[0] == TextDelta("local")
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_no_key_and_no_base_url_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="no API key"):
        asyncio.run(collect(OpenAIChatModel("gpt-test"), user_request()))


def test_a_tool_round_trip_through_run_sends_tool_calls_and_tool_messages_back():
    calls = [("call_a", "lookup", ['{"word": ', '"cat"}']), ("call_b", "lookup", ['{"word": "dog"}'])]
    with ScriptedServer(Reply(chat_events([], calls)), Reply(chat_events(["Both found."]))) as server:
        result = asyncio.run(run("define cat and dog", model=model(server), tools=[lookup_tool()],
                                 system="sys"))
    assert result.status == "complete" and result.answer == "Both found."
    validate_history(result.history)
    assert server.requests[1].body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "define cat and dog"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "cat"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "dog"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "cat means something"},
        {"role": "tool", "tool_call_id": "call_b", "content": "dog means something"},
    ]


def test_aborting_mid_stream_closes_the_connection_promptly():
    stop = StopSignal()
    stopped_at: list[float] = []
    timers: list[threading.Timer] = []

    def press_stop() -> None:
        stopped_at.append(time.monotonic())
        stop.set()

    def on_event(event: object) -> None:  # press Stop 0.3 s after the text starts streaming
        if isinstance(event, TextDelta) and not timers:
            timers.append(threading.Timer(0.3, press_stop))
            timers[0].start()

    slow = Reply(chat_events([f"word{i} " for i in range(400)]), delay=0.02)
    with ScriptedServer(slow) as server:
        try:
            result = asyncio.run(run("talk slowly", model=model(server), stop=stop, on_event=on_event))
        finally:
            for timer in timers:
                timer.cancel()
        assert server.disconnected.wait(2.0), "the server never saw the client go away"
    assert stopped_at and server.disconnected_at is not None
    assert server.disconnected_at - stopped_at[0] < 1.0
    assert result.status == "aborted"
    validate_history(result.history)
