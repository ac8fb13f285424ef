"""WindowServer itself, through the real openai SDK: it counts, reports and refuses as the real servers do."""

from __future__ import annotations

import json
import math
import urllib.request

import openai
import pytest
from openai_server import TEST_KEY, Answer, Reply, WindowServer, count_tokens

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def client(server: WindowServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=TEST_KEY, max_retries=0)


def chat(server: WindowServer, text: str, **options) -> list:
    return list(client(server).chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": text}], stream=True, **options))


def responses(server: WindowServer, text: str, **options) -> list:
    return list(client(server).responses.create(model="test-model", input=text, stream=True, **options))


def get(server: WindowServer, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(server.url.removesuffix("/v1") + path, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_the_count_is_the_whole_body_in_bytes_over_3_5_and_not_the_text_over_4():
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": "é" * 700}]}
    size = len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
    assert count_tokens(body) == math.ceil(size / 3.5)
    assert count_tokens(body) > 1.5 * 700 / 4  # é is two bytes; the keys count too


def test_a_fitting_chat_request_streams_the_answer_with_the_counted_prompt_tokens_in_usage():
    seen = []

    def answer(body, prompt_tokens):
        seen.append((body["messages"][-1]["content"], prompt_tokens))
        return Answer(["Hel", "lo"], output_tokens=2)

    with WindowServer(window=1000, reply=answer) as server:
        chunks = chat(server, "say hello", stream_options={"include_usage": True})
        bare = chat(server, "again")
    counted = server.measured[0].prompt_tokens
    assert counted == count_tokens(server.requests[0].body) and seen[0] == ("say hello", counted)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert chunks[-1].usage.prompt_tokens == counted and chunks[-1].usage.completion_tokens == 2
    assert all(c.usage is None for c in bare)  # no include_usage, no usage chunk, as the API does
    assert not server.refused()


def test_a_fitting_responses_request_reports_input_and_output_tokens_and_streams_tool_calls():
    answer = Answer(["Looking"], [("call_1", "lookup", '{"word": "a"}')])
    with WindowServer(window=1000, reply=lambda body, tokens: answer) as server:
        events = responses(server, "define a")
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.usage.input_tokens == server.measured[0].prompt_tokens
    assert completed.response.usage.output_tokens == answer.tokens() == (7 + 13) // 4
    assert [item.type for item in completed.response.output] == ["message", "function_call"]
    assert completed.response.output[1].arguments == '{"word": "a"}'


def test_a_reply_may_be_a_raw_reply_and_the_window_may_change_while_serving():
    with WindowServer(window=1000, reply=lambda body, tokens: Reply(status=500, body={"error": {"message": "x"}},
                                                                    headers={"x-should-retry": "false"})) as server:
        with pytest.raises(openai.InternalServerError):
            chat(server, "hi")
        server.window = 5
        with pytest.raises(openai.BadRequestError):
            chat(server, "hi")
    assert [m.refused for m in server.measured] == [False, True]


BIG = "word " * 1000  # ~1,450 tokens by the server's count


def test_llamacpp_refuses_with_its_exceed_context_size_error_on_both_apis():
    with WindowServer(window=1000, overflow="llamacpp") as server:
        for send in (chat, responses):
            with pytest.raises(openai.BadRequestError) as caught:
                send(server, BIG)
            counted = server.measured[-1].prompt_tokens
            assert caught.value.status_code == 400
            assert caught.value.body == {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": counted, "n_ctx": 1000,
                "message": f"request ({counted} tokens) exceeds the available context size (1000 tokens), "
                           "try increasing it"}
    assert [m.api for m in server.refused()] == ["chat", "responses"]


def test_vllm_refuses_with_its_bad_request_error_naming_the_window():
    with WindowServer(window=1000, overflow="vllm") as server:
        with pytest.raises(openai.BadRequestError) as caught:
            chat(server, BIG, max_tokens=100)
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "message": "This model's maximum context length is 1000 tokens. However, you requested 100 output tokens "
                   "and your prompt contains at least 901 input tokens, for a total of at least 1001 tokens. Please "
                   "reduce the length of the input prompt or the number of requested output tokens. "
                   "(parameter=input_tokens, value=901)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}


def test_openai_refuses_with_context_length_exceeded_on_both_apis():
    with WindowServer(window=1000, overflow="openai") as server:
        with pytest.raises(openai.BadRequestError) as on_chat:
            chat(server, BIG)
        with pytest.raises(openai.BadRequestError) as on_responses:
            responses(server, BIG)
    counted = server.measured[0].prompt_tokens
    assert on_chat.value.code == on_responses.value.code == "context_length_exceeded"
    assert on_chat.value.body == {
        "message": f"This model's maximum context length is 1000 tokens. However, your messages resulted in "
                   f"{counted} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    assert on_responses.value.body["message"].startswith("Your input exceeds the context window of this model.")
    assert on_responses.value.param == "input"


def test_openai_sse_error_is_raised_by_the_sdk_mid_stream():
    with WindowServer(window=1000, overflow="openai_sse_error") as server:
        stream = client(server).responses.create(model="test-model", input=BIG, stream=True)
        seen = []
        with pytest.raises(openai.APIError) as caught:
            for event in stream:
                seen.append(event.type)
    assert seen == ["response.created", "response.in_progress"]  # the stream had started: HTTP 200
    assert not isinstance(caught.value, openai.APIStatusError)
    assert caught.value.code == "context_length_exceeded" and caught.value.type == "invalid_request_error"
    assert caught.value.message.startswith("Your input exceeds the context window")


def test_openai_response_failed_is_streamed_as_a_failed_event():
    with WindowServer(window=1000, overflow="openai_response_failed") as server:
        events = responses(server, BIG)
        with pytest.raises(openai.BadRequestError):  # Chat has no such event: it gets the 400, as the API sends
            chat(server, BIG)
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    assert events[-1].response.status == "failed"
    assert events[-1].response.error.code == "context_length_exceeded"


def test_props_and_models_tell_the_window_as_each_server_does():
    with WindowServer(window=4096, overflow="llamacpp") as llama:
        status, props = get(llama, "/props")
        _, models = get(llama, "/v1/models")
    assert status == 200 and props["default_generation_settings"]["n_ctx"] == 4096
    assert models["data"][0]["meta"]["n_ctx"] == 4096
    with WindowServer(window=4096, overflow="vllm") as vllm:
        status, _ = get(vllm, "/props")
        _, models = get(vllm, "/v1/models")
    assert status == 404 and models["data"][0]["max_model_len"] == 4096
    with WindowServer(window=4096, props=True) as asked:
        assert get(asked, "/props")[1]["default_generation_settings"]["n_ctx"] == 4096
        assert "meta" not in get(asked, "/v1/models")[1]["data"][0]


def test_each_request_is_kept_as_a_history_that_can_be_validated():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "out"}]
    with WindowServer(window=1000) as server:
        client(server).chat.completions.create(model="test-model", messages=messages, stream=True).close()
        broken = [{"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}]
        list(client(server).responses.create(model="test-model", input=broken, stream=True))
    fine, bad = server.measured
    assert [item["type"] for item in fine.items()] == ["message", "function_call", "function_call_output"]
    assert fine.problems() == []
    assert bad.problems() == ["item 0: function_call 'c2' has no output"]
