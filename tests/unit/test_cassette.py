"""Record a real run to a cassette, replay it with no network and no key, and fail clearly off script."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import pytest
from openai_server import (
    TEST_KEY,
    Reply,
    ScriptedServer,
    chat_events,
    lookup_tool,
    responses_events,
    user_request,
)

from agentkernel import ScriptedModel, StopSignal, Turn, run, tool, validate_history
from agentkernel.models import (
    Call,
    FunctionCallEvent,
    ModelError,
    OpenAIChatModel,
    OpenAIResponsesModel,
    RecordingModel,
    ReplayModel,
)


def responses_replies() -> list[Reply]:
    calls = [("call_x1", "lookup", '{"word": "cat"}'), ("call_x2", "lookup", '{"word": "dog"}')]
    return [Reply(responses_events(["Looking."], calls, usage=(30, 8))),
            Reply(responses_events(["Cats and dogs ", "both mean something."], usage=(60, 9)))]


def chat_replies() -> list[Reply]:
    calls = [("call_x1", "lookup", ['{"word": ', '"cat"}']), ("call_x2", "lookup", ['{"word": "dog"}'])]
    return [Reply(chat_events(["Looking."], calls, usage=(30, 8))),
            Reply(chat_events(["Cats and dogs ", "both mean something."], usage=(60, 9)))]


ADAPTERS = {"responses": (OpenAIResponsesModel, responses_replies), "chat": (OpenAIChatModel, chat_replies)}


def record(tmp_path, adapter: str = "responses", prompt: str = "define cat and dog"):
    model_class, replies = ADAPTERS[adapter]
    cassette = tmp_path / "run.jsonl"
    with ScriptedServer(*replies()) as server:
        live = model_class("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run(prompt, model=RecordingModel(live, cassette), tools=[lookup_tool()]))
    return cassette, result


def cut_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key in the environment, and any attempt to open a connection fails loudly."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")

    def refuse(*args, **kwargs):
        raise AssertionError("replay tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("adapter", ["responses", "chat"])
def test_replay_gives_the_recorded_run_with_no_network_and_no_key(tmp_path, monkeypatch, adapter):
    cassette, recorded = record(tmp_path, adapter)
    assert recorded.status == "complete"
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["request"]["last"] == [{"type": "message", "role": "user", "content": "define cat and dog"}]
    assert lines[0]["request"]["tools"] == ["lookup"]
    assert lines[1]["request"]["last"] == [
        {"type": "function_call_output", "output": "cat means something"},
        {"type": "function_call_output", "output": "dog means something"},
    ]
    assert {"type": "function_call", "call_id": "call_x1", "name": "lookup",
            "arguments": '{"word": "cat"}'} in lines[0]["events"]

    cut_the_network(monkeypatch)
    with pytest.raises(AssertionError, match="network"):
        socket.create_connection(("127.0.0.1", 9))
    replay = ReplayModel(cassette)
    replayed = asyncio.run(run("define cat and dog", model=replay, tools=[lookup_tool()]))
    assert (replayed.status, replayed.answer, replayed.history) == (recorded.status, recorded.answer,
                                                                    recorded.history)
    assert replayed.usage.total_tokens == recorded.usage.total_tokens == 107
    assert [i["call_id"] for i in replayed.history if i["type"] == "function_call"] == ["call_x1", "call_x2"]
    assert replay.remaining == 0
    validate_history(replayed.history)


def test_a_cassette_never_holds_the_key_or_an_authorization_header(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)

    @tool
    def leak() -> str:
        """Return the environment's key (a careless tool)."""
        return f"the key is {os.environ['OPENAI_API_KEY']}"

    cassette = tmp_path / "leak.jsonl"
    replies = [Reply(responses_events([], [("c1", "leak", "{}")])), Reply(responses_events(["ok"]))]
    with ScriptedServer(*replies) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)  # the environment names the server: it gets the key
        live = OpenAIResponsesModel("test-model")
        result = asyncio.run(run("go", model=RecordingModel(live, cassette), tools=[leak]))
    assert result.status == "complete"
    assert server.requests[0].headers["authorization"] == f"Bearer {TEST_KEY}"
    text = cassette.read_text()
    assert TEST_KEY not in text and "SECRET" not in text
    assert "authorization" not in text.lower() and "bearer" not in text.lower()
    assert "the key is [secret $OPENAI_API_KEY]" in text


def test_replay_fails_clearly_when_the_run_asks_for_more_than_the_cassette_holds(tmp_path):
    cassette, _ = record(tmp_path)
    first_line = cassette.read_text().splitlines()[0]
    cassette.write_text(first_line + "\n")
    result = asyncio.run(run("define cat and dog", model=ReplayModel(cassette), tools=[lookup_tool()]))
    assert result.status == "fatal_error"
    assert "holds 1 model request(s), but the run asked for request 2" in result.detail
    validate_history(result.history)


def test_replay_fails_clearly_on_another_prompt(tmp_path):
    cassette, _ = record(tmp_path)
    result = asyncio.run(run("define cow", model=ReplayModel(cassette), tools=[lookup_tool()]))
    assert result.status == "fatal_error"
    assert "request 1 does not match the cassette run.jsonl: the new input differs" in result.detail
    assert "define cat and dog" in result.detail and "define cow" in result.detail


def test_replay_fails_clearly_on_other_tool_outputs(tmp_path):
    cassette, _ = record(tmp_path)

    @tool
    def lookup(word: str) -> str:
        """Look a word up in the dictionary."""
        return f"{word} is unknown"

    result = asyncio.run(run("define cat and dog", model=ReplayModel(cassette), tools=[lookup]))
    assert result.status == "fatal_error"
    assert "request 2 does not match" in result.detail and "cat is unknown" in result.detail
    validate_history(result.history)


def test_replay_fails_clearly_on_other_tools(tmp_path):
    cassette, _ = record(tmp_path)

    @tool
    def search(text: str) -> str:
        """Search."""
        return text

    result = asyncio.run(run("define cat and dog", model=ReplayModel(cassette), tools=[lookup_tool(), search]))
    assert result.status == "fatal_error"
    assert "the tools differ: recorded ['lookup'], now ['lookup', 'search']" in result.detail


def test_a_recorded_model_error_is_replayed_as_the_same_error(tmp_path):
    cassette = tmp_path / "refused.jsonl"
    with ScriptedServer(Reply(status=401, body={"error": {"message": "no"}})) as server:
        live = OpenAIChatModel("test-model", base_url=server.url, api_key=TEST_KEY)
        recorded = asyncio.run(run("hi", model=RecordingModel(live, cassette)))
    replayed = asyncio.run(run("hi", model=ReplayModel(cassette)))
    assert recorded.status == replayed.status == "fatal_error"
    assert replayed.detail == recorded.detail and "401 Unauthorized" in replayed.detail
    assert TEST_KEY not in cassette.read_text()


def test_an_aborted_recording_is_marked_and_replays_as_a_clear_error(tmp_path):
    cassette = tmp_path / "aborted.jsonl"
    stop = StopSignal()
    slow = ScriptedModel([Turn(text="one two three four five six seven eight", delay=0.05)])
    threading.Timer(0.12, stop.set).start()
    recorded = asyncio.run(run("count", model=RecordingModel(slow, cassette), stop=stop))
    assert recorded.status == "aborted"
    line = json.loads(cassette.read_text())
    assert line["interrupted"] is True and line["events"][0] == {"type": "text", "text": "one"}
    replayed = asyncio.run(run("count", model=ReplayModel(cassette)))
    assert replayed.status == "fatal_error" and "recorded from a run stopped during request 1" in replayed.detail


def test_recording_wraps_any_model_and_passes_events_through_unchanged(tmp_path):
    scripted = ScriptedModel([[Call("lookup", {"word": "a"}, call_id="id-1")], "done"])
    cassette = tmp_path / "scripted.jsonl"
    recorder = RecordingModel(scripted, cassette)
    assert recorder.name == "scripted"

    async def first_turn():
        return [event async for event in recorder.stream(user_request("x", [lookup_tool().schema()]))]

    events = asyncio.run(first_turn())
    assert events[0] == FunctionCallEvent("id-1", "lookup", '{"word": "a"}')
    replay = ReplayModel(cassette)
    assert replay.name == "replay of scripted"

    async def replayed():
        return [event async for event in replay.stream(user_request("x", [lookup_tool().schema()]))]

    assert asyncio.run(replayed()) == events
    with pytest.raises(ModelError, match="holds 1 model request"):
        asyncio.run(replayed())


def test_a_lenient_replay_skips_the_request_checks(tmp_path):
    cassette = tmp_path / "hello.jsonl"
    asyncio.run(run("hello", model=RecordingModel(ScriptedModel(["Hi there"]), cassette)))
    result = asyncio.run(run("something else", model=ReplayModel(cassette, strict=False)))
    assert result.status == "complete" and result.answer == "Hi there"


def test_recording_again_starts_the_cassette_afresh(tmp_path):
    cassette = tmp_path / "again.jsonl"
    asyncio.run(run("first", model=RecordingModel(ScriptedModel(["one"]), cassette)))
    asyncio.run(run("second", model=RecordingModel(ScriptedModel(["two"]), cassette)))
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [line["events"][0]["text"] for line in lines] == ["two"]  # the old run is not first in line
    replayed = asyncio.run(run("second", model=ReplayModel(cassette)))
    assert (replayed.status, replayed.answer) == ("complete", "two")


def test_one_recorder_appends_its_own_exchanges_and_append_keeps_the_file(tmp_path):
    cassette = tmp_path / "kept.jsonl"
    recorder = RecordingModel(ScriptedModel([Call("lookup", {"word": "a"}), "done"]), cassette)
    asyncio.run(run("go", model=recorder, tools=[lookup_tool()]))
    assert len(cassette.read_text().splitlines()) == 2
    asyncio.run(run("more", model=recorder, tools=[lookup_tool()]))  # the same recorder, a second run: appended
    assert len(cassette.read_text().splitlines()) == 4
    asyncio.run(run("x", model=RecordingModel(ScriptedModel(["x"]), cassette, append=True)))
    assert len(cassette.read_text().splitlines()) == 5


def test_replay_fails_clearly_on_another_system_prompt(tmp_path):
    cassette = tmp_path / "system.jsonl"
    asyncio.run(run("hello", model=RecordingModel(ScriptedModel(["Hi"]), cassette), system="Be brief."))
    assert "Be brief" not in cassette.read_text()  # a hash, not the prompt
    same = asyncio.run(run("hello", model=ReplayModel(cassette), system="Be brief."))
    assert same.status == "complete"
    other = asyncio.run(run("hello", model=ReplayModel(cassette), system="Be verbose."))
    assert other.status == "fatal_error"
    assert "request 1 does not match the cassette system.jsonl: the system prompt differs" in other.detail


def test_replay_fails_clearly_on_a_changed_tool_schema(tmp_path):
    cassette, _ = record(tmp_path)

    @tool
    def lookup(word: str, language: str = "en") -> str:
        """Look a word up in the dictionary."""
        return f"{word} means something"

    result = asyncio.run(run("define cat and dog", model=ReplayModel(cassette), tools=[lookup]))
    assert result.status == "fatal_error"
    assert "the schema (description or parameters) of lookup differs from the recording" in result.detail


def test_a_cassette_from_before_the_system_and_schema_checks_still_replays(tmp_path):
    cassette, recorded = record(tmp_path)
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    for line in lines:
        del line["request"]["system"], line["request"]["schemas"]
    cassette.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replayed = asyncio.run(run("define cat and dog", model=ReplayModel(cassette), tools=[lookup_tool()],
                               system="another prompt than the recording's"))
    assert (replayed.status, replayed.history) == ("complete", recorded.history)


def test_a_truncated_response_is_recorded_and_replayed(tmp_path):
    cassette = tmp_path / "cut.jsonl"
    with ScriptedServer(Reply(chat_events(["The answer is"], finish="length"))) as server:
        live = OpenAIChatModel("test-model", base_url=server.url)
        recorded = asyncio.run(run("go", model=RecordingModel(live, cassette)))
    assert json.loads(cassette.read_text())["events"][-1] == {"type": "truncated", "reason": "length"}
    replayed = asyncio.run(run("go", model=ReplayModel(cassette)))
    assert recorded.status == replayed.status == "truncated" and replayed.detail == recorded.detail
