"""AnthropicMessagesModel through the real anthropic SDK against a loopback HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from anthropic_server import error_body, messages_events, sent_key
from openai_server import (
    TEST_KEY,
    Reply,
    ScriptedServer,
    StopAfterText,
    collect,
    lookup_tool,
    user_request,
    without_progress,
)

from agentkernel import StopSignal, run, validate_history
from agentkernel.models import FunctionCallEvent, ModelError, ModelRequest, TextDelta, UsageEvent
from agentkernel.models.anthropic_messages import AnthropicMessagesModel, add_message
from agentkernel.models.base import ContextOverflowError, Thinking, Truncation
from agentkernel.models.cassette import RecordingModel, ReplayModel

CACHE = {"type": "ephemeral"}


def model(server: ScriptedServer, **options) -> AnthropicMessagesModel:
    # server.url ends in /v1: the adapter drops it (the SDK adds /v1/messages to the root)
    return AnthropicMessagesModel("claude-test", base_url=server.url, api_key=TEST_KEY, **options)


def test_streams_text_and_reads_the_cache_fields_into_usage():
    with ScriptedServer(Reply(messages_events(["Hel", "lo"], usage=(7, 3), cache=(100, 20)))) as server:
        events = asyncio.run(collect(model(server), user_request("say hello")))
    assert events == [TextDelta("Hel"), TextDelta("lo"),
                      UsageEvent(input_tokens=127, output_tokens=3, cache_read_tokens=100, cache_write_tokens=20)]
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent_key(sent.headers) == TEST_KEY
    assert sent.body["stream"] is True and sent.body["max_tokens"] == 8192
    assert sent.body["system"] == [{"type": "text", "text": "be brief", "cache_control": CACHE}]
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "say hello", "cache_control": CACHE}]}]


def test_parallel_tool_calls_round_trip_matched_by_id_with_cache_breakpoints():
    calls = [("toolu_a", "lookup", ['{"wo', 'rd": "cat"}']), ("toolu_b", "lookup", ['{"word": "dog"}'])]
    replies = [Reply(messages_events(["Looking up."], calls)), Reply(messages_events(["Both found."]))]
    tool = lookup_tool()
    with ScriptedServer(*replies) as server:
        result = asyncio.run(run("define cat and dog", model=model(server), tools=[tool], system="sys"))
    assert result.status == "complete" and result.answer == "Both found."
    validate_history(result.history)
    first, second = (r.body for r in server.requests)
    # the tools before the system prompt are cached with it (one breakpoint, on the system prompt)
    assert first["tools"] == [{"name": "lookup", "description": tool.description, "input_schema": tool.parameters}]
    assert second["system"] == [{"type": "text", "text": "sys", "cache_control": CACHE}]
    assert second["messages"] == [
        # the message the first request ended with keeps its breakpoint: this request reads that prefix
        {"role": "user", "content": [{"type": "text", "text": "define cat and dog", "cache_control": CACHE}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking up."},
            {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"word": "cat"}},
            {"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"word": "dog"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "cat means something"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "dog means something",
             "cache_control": CACHE}]},
    ]
    assert sum(str(body).count("cache_control") for body in (second,)) == 3  # at most 4 are allowed


def _unmarked(value):
    """A request body's part without its cache breakpoints."""
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    return value


def test_every_request_has_a_breakpoint_where_the_one_before_ended():
    """What the cache needs to serve each request the previous one: the same tools and system, the previous request's
    messages as this one's prefix, and a breakpoint at the block where the previous request ended (so the prefix
    written then is read now), through rounds of one and of three parallel calls; never more than 4 breakpoints."""
    rounds = [[("t1", "lookup", ['{"word": "a"}'])],
              [(f"t{i}", "lookup", [f'{{"word": "{i}"}}']) for i in (2, 3, 4)],
              [("t5", "lookup", ['{"word": "b"}'])]]
    replies = [Reply(messages_events([f"round {n}"], calls)) for n, calls in enumerate(rounds)]
    with ScriptedServer(*replies, Reply(messages_events(["done"]))) as server:
        result = asyncio.run(run("go", model=model(server), tools=[lookup_tool()], system="sys"))
    assert result.status == "complete", result.summary
    bodies = [r.body for r in server.requests]
    for before, after in zip(bodies, bodies[1:], strict=False):
        assert (after["tools"], after["system"]) == (before["tools"], before["system"])
        end = len(before["messages"]) - 1
        assert _unmarked(after["messages"][:end + 1]) == _unmarked(before["messages"])
        assert after["messages"][end]["content"][-1]["cache_control"] == CACHE
        assert after["messages"][-1]["content"][-1]["cache_control"] == CACHE
        assert str(after).count("cache_control") <= 4


def test_caching_can_be_switched_off():
    with ScriptedServer(Reply(messages_events(["ok"]))) as server:
        asyncio.run(collect(model(server, cache=False), user_request()))
    assert "cache_control" not in str(server.requests[0].body)


def test_thinking_blocks_are_kept_on_the_turn_and_sent_back_in_front_of_it():
    first = messages_events([], [("toolu_1", "lookup", ['{"word": "cat"}'])], thinking=[("Let me think.", "sig-1")],
                            redacted=["opaque"])
    with ScriptedServer(Reply(first), Reply(messages_events(["Done."]))) as server:
        result = asyncio.run(run("define cat", model=model(server, thinking=2048), tools=[lookup_tool()]))
    assert result.status == "complete"
    kept = [{"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"},
            {"type": "redacted_thinking", "data": "opaque"}]
    call = next(item for item in result.history if item.get("type") == "function_call")
    assert call["thinking"] == kept
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assistant = server.requests[1].body["messages"][1]
    assert assistant == {"role": "assistant", "content": [
        *kept, {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "cat"}}]}


def test_the_other_adapters_leave_the_thinking_out():
    from agentkernel.models.openai_chat import chat_messages
    from agentkernel.models.openai_responses import responses_item

    item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
            "thinking": [{"type": "thinking", "thinking": "t", "signature": "s"}]}
    assert "thinking" not in responses_item(item)
    assert "thinking" not in str(chat_messages("", [item]))


def test_images_in_a_tool_result_are_image_blocks():
    image = {"media_type": "image/png", "data": "iVBORw0KGgo=", "width": 1, "height": 1}
    messages: list = []
    for item in [{"type": "message", "role": "user", "content": "plot"},
                 {"type": "function_call", "call_id": "c1", "name": "run_python", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "c1", "output": "a figure", "images": [image]}]:
        add_message(messages, item)
    assert messages[-1] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [
        {"type": "text", "text": "a figure"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}


def test_max_tokens_ends_the_response_truncated():
    with ScriptedServer(Reply(messages_events(["cut"], stop_reason="max_tokens"))) as server:
        events = asyncio.run(collect(model(server, max_output_tokens=5), user_request()))
    assert events[-1] == Truncation("max_tokens")
    assert server.requests[0].body["max_tokens"] == 5


@pytest.mark.parametrize(("text", "numbers"), [
    ("prompt is too long: 208310 tokens > 200000 maximum", (200000, 208310)),
    ("input length and `max_tokens` exceed context limit: 197969 + 21333 > 200000, decrease input length or "
     "`max_tokens` and try again", (200000, 197969)),
])
def test_a_prompt_too_long_is_a_context_overflow_error(text, numbers):
    with ScriptedServer(Reply(status=400, body=error_body("invalid_request_error", text))) as server:
        with pytest.raises(ContextOverflowError) as caught:
            asyncio.run(collect(model(server), user_request()))
    assert (caught.value.window, caught.value.prompt_tokens) == numbers


def test_the_loop_compacts_after_an_overflow_and_the_retry_completes():
    too_long = Reply(status=400, body=error_body("invalid_request_error",
                                                 "prompt is too long: 5000 tokens > 4000 maximum"))
    replies = [Reply(messages_events([], [("toolu_1", "lookup", ['{"word": "cat"}'])])), too_long,
               Reply(messages_events(["cat: found."]))]
    with ScriptedServer(*replies) as server:
        result = asyncio.run(run("define cat", model=model(server), tools=[lookup_tool()]))
    assert result.status == "complete", result.summary
    assert result.compactions == 1 and len(server.requests) == 3
    validate_history(result.history)


def test_500_and_429_are_retried_then_succeed():
    fast = {"retry-after-ms": "1"}
    replies = [Reply(status=500, body=error_body("api_error", "warming up"), headers=fast),
               Reply(status=429, body=error_body("rate_limit_error", "slow down"), headers=fast),
               Reply(messages_events(["ok"]))]
    with ScriptedServer(*replies) as server:
        events = asyncio.run(collect(model(server), user_request()))
    assert events[0] == TextDelta("ok") and len(server.requests) == 3


def test_errors_after_the_retries_are_model_errors_without_the_key():
    overloaded = Reply(status=529, body=error_body("overloaded_error", f"busy, {TEST_KEY}"),
                       headers={"retry-after-ms": "1"})
    with ScriptedServer(overloaded, overloaded) as server:
        with pytest.raises(ModelError, match=r"HTTP 529 after 1 retries: busy") as caught:
            asyncio.run(collect(model(server, max_retries=1), user_request()))
    assert TEST_KEY not in str(caught.value)
    refusal = Reply(status=401, body=error_body("authentication_error", f"invalid x-api-key {TEST_KEY}"))
    with ScriptedServer(refusal) as server:
        with pytest.raises(ModelError, match=r"refused the key \(401 Unauthorized\)") as caught:
            asyncio.run(collect(model(server), user_request()))
    assert TEST_KEY not in str(caught.value)


def test_an_error_event_mid_stream_is_a_model_error_in_the_servers_words():
    overloaded = f"event: error\ndata: {json.dumps(error_body('overloaded_error', 'Overloaded'))}\n\n"
    with ScriptedServer(Reply([*messages_events(["a"], end=False), overloaded])) as server:
        with pytest.raises(ModelError, match="reported an error in the middle of its answer: Overloaded"):
            asyncio.run(collect(model(server), user_request()))


def test_a_stream_that_ends_before_message_stop_is_a_model_error():
    with ScriptedServer(Reply(messages_events(["a"], end=False))) as server:
        with pytest.raises(ModelError, match="ended before the message was complete"):
            asyncio.run(collect(model(server), user_request()))


def test_stop_mid_stream_closes_the_connection_promptly():
    stop = StopSignal()
    press = StopAfterText(stop)
    with ScriptedServer(Reply(messages_events([f"word{i} " for i in range(400)]), delay=0.02)) as server:
        try:
            result = asyncio.run(run("talk slowly", model=model(server), stop=stop, on_event=press))
        finally:
            press.cancel()
        assert server.disconnected.wait(2.0), "the server never saw the client go away"
    assert press.stopped_at is not None and server.disconnected_at is not None
    assert server.disconnected_at - press.stopped_at < 1.0
    assert result.status == "aborted"
    validate_history(result.history)


def test_record_and_replay_keep_calls_and_thinking(tmp_path: Path):
    first = messages_events([], [("toolu_1", "lookup", ['{"word": "cat"}'])], thinking=[("hm", "sig")])
    cassette = tmp_path / "run.jsonl"
    with ScriptedServer(Reply(first), Reply(messages_events(["Done."]))) as server:
        recorded = asyncio.run(run("define cat", model=RecordingModel(model(server), cassette), tools=[lookup_tool()]))
    assert TEST_KEY not in cassette.read_text()
    replayed = asyncio.run(run("define cat", model=ReplayModel(cassette), tools=[lookup_tool()]))
    assert replayed.status == recorded.status == "complete"
    assert [i for i in replayed.history if "call_id" not in i] == [i for i in recorded.history if "call_id" not in i]
    assert next(i for i in replayed.history if i.get("type") == "function_call")["thinking"][0]["signature"] == "sig"


def test_a_call_streams_progress_then_arrives_whole():
    with ScriptedServer(Reply(messages_events([], [("toolu_1", "lookup", ['{"wo', 'rd": "x"}'])]))) as server:
        events = asyncio.run(collect(model(server), ModelRequest("", user_request().history, [lookup_tool().schema()])))
    assert without_progress(events)[:1] == [FunctionCallEvent("toolu_1", "lookup", '{"word": "x"}')]
    assert not any(isinstance(e, Thinking) for e in events)
