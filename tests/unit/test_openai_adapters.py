"""What both OpenAI adapters promise alike, through the real openai SDK against the loopback server: truncation,
per-request options, which key goes where, what an error says about retries, and the history converted once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from openai_server import (
    TEST_KEY,
    Reply,
    ScriptedServer,
    chat_events,
    collect,
    lookup_tool,
    responses_call_started,
    responses_events,
    user_request,
)

from agentkernel import run, tool, validate_history
from agentkernel.events import FunctionCallProgress, ToolCallFinished
from agentkernel.models import ModelError, OpenAIChatModel, OpenAIResponsesModel, TextDelta, Truncation
from agentkernel.models._openai_common import InputCache
from agentkernel.models.openai_chat import chat_messages
from agentkernel.models.openai_responses import responses_input

ADAPTERS = {"responses": OpenAIResponsesModel, "chat": OpenAIChatModel}


def answer(api: str, text: list[str]) -> Reply:
    return Reply(responses_events(text) if api == "responses" else chat_events(text))


def counting_lookup() -> tuple[Any, list[str]]:
    ran: list[str] = []

    @tool
    def lookup(word: str) -> str:
        """Look a word up in the dictionary."""
        ran.append(word)
        return f"{word} means something"

    return lookup, ran


# -- 1. truncation ------------------------------------------------------------------------------------------------


def truncated_reply(api: str, reason: str) -> Reply:
    """Some text and a call whose arguments parse, then the server's "cut short" for ``reason``."""
    if api == "responses":
        return Reply(responses_events(["The answer is"], [("call_t", "lookup", '{"word": "cat"}')],
                                      incomplete=reason))
    return Reply(chat_events(["The answer is"], [("call_t", "lookup", ['{"word": ', '"cat"}'])], finish=reason))


@pytest.mark.parametrize(("api", "reason"), [("responses", "max_output_tokens"), ("responses", "content_filter"),
                                             ("chat", "length"), ("chat", "content_filter")])
def test_a_truncated_response_ends_the_run_and_runs_none_of_its_calls(api, reason):
    lookup, ran = counting_lookup()
    with ScriptedServer(truncated_reply(api, reason)) as server:
        model = ADAPTERS[api]("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run("define cat", model=model, tools=[lookup]))
    assert result.status == "truncated"
    assert f"({reason})" in result.detail and "the text that arrived is kept" in result.detail
    assert result.summary.startswith("Stopped with TRUNCATED after 1 round and 0 tool calls")
    assert result.answer == "The answer is"
    assert ran == []  # the call's arguments parse, and still it did not run
    call, output = result.history[-2:]
    assert (call["type"], call["arguments"]) == ("function_call", '{"word": "cat"}')
    assert output["call_id"] == call["call_id"] and output["synthetic"] is True
    assert output["output"] == f"not run: the server cut the model's response short ({reason})"
    assert len(server.requests) == 1
    validate_history(result.history)


def test_a_responses_call_cut_while_being_written_is_kept_and_not_run():
    lookup, ran = counting_lookup()
    events = responses_events(complete=False) + responses_call_started("call_half", "lookup", '{"wor')
    events += responses_events(incomplete="max_output_tokens")[-1:]
    seen: list[Any] = []
    with ScriptedServer(Reply(events)) as server:
        model = OpenAIResponsesModel("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run("define cat", model=model, tools=[lookup], on_event=seen.append))
    assert result.status == "truncated" and "(max_output_tokens)" in result.detail and ran == []
    assert result.history[-2] == {"type": "function_call", "call_id": "call_half", "name": "lookup",
                                  "arguments": '{"wor'}
    assert [e.result.status for e in seen if isinstance(e, ToolCallFinished)] == ["not_run"]
    validate_history(result.history)


def test_the_adapters_send_truncation_after_what_arrived():
    with ScriptedServer(Reply(chat_events(["cut"], finish="length"))) as server:
        events = asyncio.run(collect(OpenAIChatModel("m", base_url=server.url), user_request()))
    assert events[0] == TextDelta("cut") and events[-1] == Truncation("length")
    with ScriptedServer(Reply(responses_events(["cut"], incomplete="max_output_tokens"))) as server:
        events = asyncio.run(collect(OpenAIResponsesModel("m", base_url=server.url), user_request()))
    assert events[0] == TextDelta("cut") and events[-1] == Truncation("max_output_tokens")


# -- 2. per-request output cap and temperature --------------------------------------------------------------------


@pytest.mark.parametrize(("api", "field"), [("responses", "max_output_tokens"), ("chat", "max_tokens")])
def test_output_cap_and_temperature_are_sent_with_each_request(api, field):
    with ScriptedServer(answer(api, ["a"]), answer(api, ["b"])) as server:
        capped = ADAPTERS[api]("m", base_url=server.url, max_output_tokens=64, temperature=0.0)
        asyncio.run(collect(capped, user_request()))
        asyncio.run(collect(ADAPTERS[api]("m", base_url=server.url), user_request()))
    sent, plain = server.requests[0].body, server.requests[1].body
    assert (sent[field], sent["temperature"]) == (64, 0.0)
    assert not {"max_tokens", "max_completion_tokens", "max_output_tokens", "temperature"} & set(plain)


def test_chat_sends_the_cap_as_max_completion_tokens_to_the_openai_api_only():
    assert OpenAIChatModel("m", base_url="https://api.openai.com/v1/").output_cap_field == "max_completion_tokens"
    assert OpenAIChatModel("m", base_url="http://localhost:8080/v1").output_cap_field == "max_tokens"


def test_a_cap_that_is_not_positive_is_refused_when_built():
    with pytest.raises(ValueError, match="max_output_tokens must be a positive number"):
        OpenAIChatModel("m", max_output_tokens=0)


# -- 4. which key goes where --------------------------------------------------------------------------------------


def sent_key(server: ScriptedServer) -> str:
    return server.requests[-1].headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_environment_key_is_not_sent_to_a_base_url_the_environment_does_not_name(api, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ScriptedServer(answer(api, ["hi"])) as server:
        events = asyncio.run(collect(ADAPTERS[api]("m", base_url=server.url), user_request()))
    assert events[0] == TextDelta("hi")
    assert sent_key(server) == "not-needed"


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_environment_key_goes_to_the_base_url_the_environment_names(api, monkeypatch):
    with ScriptedServer(answer(api, ["a"]), answer(api, ["b"])) as server:
        monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
        asyncio.run(collect(ADAPTERS[api]("m"), user_request()))
        assert sent_key(server) == TEST_KEY
        asyncio.run(collect(ADAPTERS[api]("m", base_url=server.url), user_request()))  # the same URL, given
        assert sent_key(server) == TEST_KEY


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_api_key_env_names_the_variable_holding_the_servers_key(api, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("MY_SERVER_KEY", "sk-server-only-0123456789")
    with ScriptedServer(answer(api, ["hi"])) as server:
        model = ADAPTERS[api]("m", base_url=server.url, api_key_env="MY_SERVER_KEY")
        asyncio.run(collect(model, user_request()))
    assert sent_key(server) == "sk-server-only-0123456789"
    assert "sk-server-only-0123456789" in model.secrets()


def test_api_key_env_naming_an_unset_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(ModelError, match="NO_SUCH_KEY_VAR .* is not set"):
        asyncio.run(collect(model, user_request()))


def test_a_server_that_wants_a_key_it_did_not_get_says_how_to_give_one(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ScriptedServer(Reply(status=401, body={"error": {"message": "key required"}})) as server:
        with pytest.raises(ModelError, match="it got none: OPENAI_API_KEY goes only to") as caught:
            asyncio.run(collect(OpenAIChatModel("m", base_url=server.url), user_request()))
    assert "--api-key-env" in str(caught.value) and TEST_KEY not in str(caught.value)


# -- 3. what an error says about retries --------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "said"), [
    (400, "rejected the request (HTTP 400): bad field"),
    (422, "rejected the request (HTTP 422): bad field"),
    (403, "refused access (403 Forbidden): bad field"),
    (404, "404 Not Found (wrong model name or base URL?): bad field"),
])
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_errors_the_sdk_never_retries_do_not_claim_retries(api, status, said):
    with ScriptedServer(Reply(status=status, body={"error": {"message": "bad field"}})) as server:
        with pytest.raises(ModelError) as caught:
            asyncio.run(collect(ADAPTERS[api]("m", base_url=server.url, max_retries=2), user_request()))
    assert said in str(caught.value) and "retries" not in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(("status", "headers", "requests", "said"), [
    (429, {"retry-after-ms": "1"}, 2, "rate limited or out of quota (429) after 1 retries: busy"),
    (503, {"retry-after-ms": "1"}, 2, "HTTP 503 after 1 retries: busy"),
    (500, {"x-should-retry": "false"}, 1, "HTTP 500: busy"),
])
def test_errors_say_after_how_many_retries_only_when_the_sdk_retried(status, headers, requests, said):
    error = Reply(status=status, body={"error": {"message": "busy"}}, headers=headers)
    with ScriptedServer(error, error) as server:
        with pytest.raises(ModelError) as caught:
            asyncio.run(collect(OpenAIChatModel("m", base_url=server.url, max_retries=1), user_request()))
    assert said in str(caught.value)
    assert len(server.requests) == requests


# -- 6. progress while a call is written, through the loop -------------------------------------------------------


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_listeners_see_a_call_while_it_is_written(api):
    pieces = ['{"word": ', '"c', 'at"}']
    first = (Reply(responses_events([], [("call_p", "lookup", "".join(pieces))])) if api == "responses"
             else Reply(chat_events([], [("call_p", "lookup", pieces)])))
    seen: list[Any] = []
    with ScriptedServer(first, answer(api, ["done"])) as server:
        model = ADAPTERS[api]("m", base_url=server.url)
        result = asyncio.run(run("define cat", model=model, tools=[lookup_tool()], on_event=seen.append))
    assert result.status == "complete"
    progress = [e for e in seen if isinstance(e, FunctionCallProgress)]
    assert progress[0] == FunctionCallProgress("call_p", "lookup", 0)
    assert progress[-1] == FunctionCallProgress("call_p", "lookup", len("".join(pieces)))
    started = next(i for i, e in enumerate(seen) if type(e).__name__ == "ToolCallStarted")
    assert seen.index(progress[-1]) < started


# -- 8. the history converted once per item ----------------------------------------------------------------------


def test_the_input_cache_converts_only_the_items_added_since_the_last_request():
    folded: list[dict[str, Any]] = []

    def fold(converted: list[dict[str, Any]], item: dict[str, Any]) -> None:
        folded.append(item)
        converted.append(dict(item))

    cache = InputCache(fold)
    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": str(i)} for i in range(100)]
    assert cache.convert(history) == history and len(folded) == 100
    history += [{"type": "message", "role": "assistant", "content": "a"}, {"type": "message", "role": "user"}]
    assert cache.convert(history) == history and len(folded) == 102  # two new items, two conversions
    assert cache.convert(history) == history and len(folded) == 102
    assert cache.convert(list(history)) == history and len(folded) == 204  # another list: converted afresh
    shorter = history[:50]
    assert cache.convert(shorter) == shorter and len(folded) == 254


def test_a_multi_round_chat_run_sends_the_same_messages_as_a_full_conversion():
    round_one = chat_events(["Looking."], [("c1", "lookup", ['{"word": "a"}'])])
    round_two = chat_events([], [("c2", "lookup", ['{"word": "b"}']), ("c3", "lookup", ['{"word": "c"}'])])
    with ScriptedServer(Reply(round_one), Reply(round_two), Reply(chat_events(["Done."]))) as server:
        model = OpenAIChatModel("m", base_url=server.url)
        result = asyncio.run(run("define a, b, c", model=model, tools=[lookup_tool()], system="sys"))
    assert result.status == "complete"
    sizes = [1, 4, 8]  # history items the model had seen at each request
    for request, size in zip(server.requests, sizes, strict=True):
        assert request.body["messages"] == chat_messages("sys", result.history[:size])


def test_a_multi_round_responses_run_sends_the_same_input_as_a_full_conversion():
    round_one = responses_events(["Looking."], [("c1", "lookup", '{"word": "a"}')])
    replies = [Reply(round_one), Reply(responses_events(["Done."])), Reply(responses_events(["Also."]))]
    with ScriptedServer(*replies) as server:
        model = OpenAIResponsesModel("m", base_url=server.url)
        first = asyncio.run(run("define a", model=model, tools=[lookup_tool()]))
        second = asyncio.run(run("and b?", model=model, history=first.history))  # another run, another list
    assert second.status == "complete"
    assert server.requests[1].body["input"] == responses_input(first.history[:4])
    assert server.requests[2].body["input"] == responses_input(second.history[:6])
