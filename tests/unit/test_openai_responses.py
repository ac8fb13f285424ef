"""OpenAIResponsesModel through the real openai SDK against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from openai_server import (
    TEST_KEY,
    Reply,
    ScriptedServer,
    collect,
    lookup_tool,
    responses_events,
    user_request,
    without_progress,
)

from agentkernel import Limits, StopSignal, run, validate_history
from agentkernel.models import (
    FunctionCallEvent,
    FunctionCallProgress,
    ModelError,
    OpenAIResponsesModel,
    TextDelta,
    UsageEvent,
)
from agentkernel.models.base import ModelRequest
from agentkernel.models.openai_responses import responses_input


def model(server: ScriptedServer, **options) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("test-model", base_url=server.url, api_key=TEST_KEY, **options)


def test_streams_text_deltas_and_usage():
    with ScriptedServer(Reply(responses_events(["Hel", "lo", "!"], usage=(12, 3)))) as server:
        events = asyncio.run(collect(model(server), user_request("say hello")))
    assert events == [TextDelta("Hel"), TextDelta("lo"), TextDelta("!"), UsageEvent(12, 3)]
    sent = server.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.body["stream"] is True and sent.body["model"] == "test-model"
    assert sent.body["instructions"] == "be brief"
    assert sent.body["input"] == [{"type": "message", "role": "user", "content": "say hello"}]
    assert sent.headers["authorization"] == f"Bearer {TEST_KEY}"


def test_parallel_function_calls_are_emitted_when_their_items_are_done():
    calls = [("call_a", "lookup", '{"word": "a"}'), ("call_b", "lookup", '{"word": "b"}')]
    tools = [lookup_tool().schema()]
    with ScriptedServer(Reply(responses_events(["Looking"], calls, usage=(7, 9)))) as server:
        events = asyncio.run(collect(model(server), user_request("define a and b", tools)))
    assert without_progress(events) == [
        TextDelta("Looking"),
        FunctionCallEvent("call_a", "lookup", '{"word": "a"}'),
        FunctionCallEvent("call_b", "lookup", '{"word": "b"}'),
        UsageEvent(7, 9),
    ]
    # Each call is announced when its item is added (the name is known), then as its arguments grow.
    assert events[1:4] == [FunctionCallProgress("call_a", "lookup", 0), FunctionCallProgress("call_a", "lookup", 13),
                           FunctionCallEvent("call_a", "lookup", '{"word": "a"}')]
    assert events[4:6] == [FunctionCallProgress("call_b", "lookup", 0), FunctionCallProgress("call_b", "lookup", 13)]
    assert server.requests[0].body["tools"] == tools


def test_input_keeps_only_the_api_keys_of_each_item():
    history = [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "extra": 1},
        {"type": "function_call_output", "call_id": "c1", "output": "aborted", "synthetic": True},
        {"type": "message", "role": "assistant", "content": "done"},
    ]
    assert responses_input(history) == [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "aborted"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]


def test_a_500_is_retried_by_the_sdk_then_succeeds():
    error = Reply(status=500, body={"error": {"message": "overloaded"}}, headers={"retry-after-ms": "1"})
    with ScriptedServer(error, Reply(responses_events(["ok"]))) as server:
        events = asyncio.run(collect(model(server, max_retries=2), user_request()))
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("ok")]
    assert len(server.requests) == 2
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"


def test_500s_beyond_the_retries_become_a_model_error():
    error = Reply(status=500, body={"error": {"message": "overloaded"}}, headers={"retry-after-ms": "1"})
    with ScriptedServer(error, error) as server:
        with pytest.raises(ModelError, match=r"HTTP 500 after 1 retries: overloaded"):
            asyncio.run(collect(model(server, max_retries=1), user_request()))
    assert len(server.requests) == 2


def test_a_401_is_a_clear_model_error_without_the_key():
    refusal = Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {TEST_KEY}",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}})
    with ScriptedServer(refusal) as server:
        with pytest.raises(ModelError) as caught:
            asyncio.run(collect(model(server), user_request()))
    message = str(caught.value)
    assert "refused the key (401 Unauthorized)" in message and "OPENAI_API_KEY" in message
    assert TEST_KEY not in message and "SECRET" not in message
    assert len(server.requests) == 1  # a 401 is not retried


def test_a_stream_cut_midway_is_a_model_error():
    with ScriptedServer(Reply(responses_events(["a", "b", "c"]), cut_after=3)) as server:
        with pytest.raises(ModelError, match="connection"):
            asyncio.run(collect(model(server, max_retries=0), user_request()))


def test_a_stream_that_ends_without_response_completed_is_a_model_error():
    with ScriptedServer(Reply(responses_events(["a", "b"], complete=False))) as server:
        with pytest.raises(ModelError, match="ended before the response was complete"):
            asyncio.run(collect(model(server), user_request()))


def test_a_failed_response_or_error_event_is_a_model_error():
    failed = responses_events(["a"], complete=False) + [
        'data: {"type": "response.failed", "sequence_number": 9, "response": {"id": "r", "status": "failed", '
        '"error": {"code": "server_error", "message": "the model crashed"}}}\n\n']
    error = responses_events(complete=False) + [
        'data: {"type": "error", "sequence_number": 2, "code": "x", "message": "bad things"}\n\n']
    with ScriptedServer(Reply(failed), Reply(error)) as server:
        with pytest.raises(ModelError, match="failed response: the model crashed"):
            asyncio.run(collect(model(server), user_request()))
        with pytest.raises(ModelError, match="bad things"):
            asyncio.run(collect(model(server), user_request()))


def test_an_unreachable_server_is_a_model_error():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = OpenAIResponsesModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=TEST_KEY,
                                       max_retries=0)
    with pytest.raises(ModelError, match=f"connection to the model API at http://127.0.0.1:{port}/v1"):
        asyncio.run(collect(unreachable, user_request()))


def test_no_key_is_a_clear_error_when_used_not_when_built(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    keyless = OpenAIResponsesModel("gpt-test")
    with pytest.raises(ModelError, match="no API key: set OPENAI_API_KEY"):
        asyncio.run(collect(keyless, user_request()))


def test_environment_key_and_base_url_are_honoured(monkeypatch):
    with ScriptedServer(Reply(responses_events(["env"]))) as server:
        monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        events = asyncio.run(collect(OpenAIResponsesModel("test-model"), user_request()))
    assert events[0] == TextDelta("env")
    assert server.requests[0].headers["authorization"] == f"Bearer {TEST_KEY}"


def test_one_model_object_serves_several_event_loops():
    with ScriptedServer(Reply(responses_events(["one"])), Reply(responses_events(["two"]))) as server:
        shared = model(server)
        first = asyncio.run(collect(shared, user_request()))
        second = asyncio.run(collect(shared, user_request()))
    assert (first[0], second[0]) == (TextDelta("one"), TextDelta("two"))


def test_a_tool_round_trip_through_run_sends_the_calls_and_outputs_back():
    calls = [("call_a", "lookup", '{"word": "cat"}'), ("call_b", "lookup", '{"word": "dog"}')]
    replies = (Reply(responses_events([], calls, usage=(300, 20))),
               Reply(responses_events(["Both found."], usage=(400, 5))))
    with ScriptedServer(*replies) as server:
        result = asyncio.run(run("define cat and dog", model=model(server), tools=[lookup_tool()]))
    assert result.status == "complete" and result.answer == "Both found."
    assert result.usage.input_tokens == 700 and result.usage.requests == 2 and not result.usage.estimated_requests
    validate_history(result.history)
    second = server.requests[1].body["input"]
    assert second[1:] == [
        {"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": '{"word": "cat"}'},
        {"type": "function_call", "call_id": "call_b", "name": "lookup", "arguments": '{"word": "dog"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "cat means something"},
        {"type": "function_call_output", "call_id": "call_b", "output": "dog means something"},
    ]
    assert server.requests[1].body["tools"][0]["name"] == "lookup"


def _slow_stream() -> Reply:
    return Reply(responses_events([f"word{i} " for i in range(400)]), delay=0.02)


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

    with ScriptedServer(_slow_stream()) as server:
        try:
            result = asyncio.run(run("talk slowly", model=model(server), stop=stop, on_event=on_event))
        finally:
            for timer in timers:
                timer.cancel()
        assert server.disconnected.wait(2.0), "the server never saw the client go away"
    assert stopped_at and server.disconnected_at is not None
    assert server.disconnected_at - stopped_at[0] < 1.0
    assert result.status == "aborted"
    assert result.answer and result.answer.startswith("word0 ")  # what streamed before the stop is kept
    assert len(server.requests) == 1
    validate_history(result.history)


def test_the_wall_clock_budget_closes_the_connection_mid_stream():
    with ScriptedServer(_slow_stream()) as server:
        started = time.monotonic()
        result = asyncio.run(run("talk slowly", model=model(server), limits=Limits(max_seconds=0.5)))
        assert server.disconnected.wait(2.0)
    assert server.disconnected_at is not None and server.disconnected_at - started < 0.5 + 1.0
    assert result.status == "hit_wall_clock"
    validate_history(result.history)


def test_closing_the_generator_closes_the_http_stream():
    async def read_two_then_close(m: OpenAIResponsesModel, server: ScriptedServer) -> bool:
        stream = m.stream(ModelRequest("", [{"type": "message", "role": "user", "content": "hi"}]))
        await anext(stream)
        await anext(stream)
        await stream.aclose()
        # still inside the event loop, the generator held elsewhere: only an explicit close drops the connection
        return await asyncio.to_thread(server.disconnected.wait, 1.0)

    with ScriptedServer(_slow_stream()) as server:
        assert asyncio.run(read_two_then_close(model(server), server))
