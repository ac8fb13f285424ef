"""The model fault matrix: whatever a model API does (a cut connection, events no adapter can read, tool arguments
that are not JSON or nested past any parser, usage that is missing or lies, errors after every retry, Stop and the
wall clock in the middle of an answer), the run ends with a status and a one-line message, never an exception out
of ``run()``, and its history stays valid; and usage that is missing or cannot be right is estimated, so
``--max-cost`` holds within one response.

Every case runs through the real SDK (``openai``, ``anthropic``) against the loopback server, parametrised over the
adapters in :data:`APIS`: a new adapter joins the matrix with one entry there.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic_server import messages_events
from cache_server import AnthropicCachingServer, CachingServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_server import (
    TEST_KEY,
    Answer,
    Reply,
    ScriptedServer,
    StopAfterText,
    chat_events,
    lookup_tool,
    responses_events,
)

from agentkernel import (
    AnthropicMessagesModel,
    Limits,
    OpenAIChatModel,
    OpenAIResponsesModel,
    Price,
    StopSignal,
    run,
    tool,
    validate_history,
)
from agentkernel.models.base import UsageEvent, is_count

Call = tuple[str, str, str]


@dataclass(frozen=True)
class Api:
    """One adapter as the matrix drives it: how to make it, and how its API streams."""

    model: Callable[..., Any]
    stream: Callable[[list[str], list[Call], tuple[int, int]], list[str]]
    """The SSE events of an answer: text pieces, calls (call_id, name, arguments), usage (input, output)."""
    delta: str
    """The type of its text delta event (``""``: the API names no event types)."""

    def event(self, data: str) -> str:
        """A text delta event carrying ``data`` as it is (which may be anything but a text delta)."""
        return f"event: {self.delta}\ndata: {data}\n\n" if self.delta else f"data: {data}\n\n"


APIS = {
    "responses": Api(OpenAIResponsesModel, lambda text, calls, usage: responses_events(text, calls, usage=usage),
                     "response.output_text.delta"),
    "chat": Api(OpenAIChatModel,
                lambda text, calls, usage: chat_events(text, [(i, n, [a]) for i, n, a in calls], usage=usage), ""),
    "anthropic": Api(AnthropicMessagesModel,
                     lambda text, calls, usage: messages_events(text, [(i, n, [a]) for i, n, a in calls], usage=usage),
                     "content_block_delta"),
}

ANSWER = ["Hello", ", world."]


def answer(api: str, text: Sequence[str] = ANSWER, calls: Sequence[Call] = (),
           usage: tuple[int, int] = (200, 10)) -> list[str]:
    """The SSE events of an answer in ``api``'s shape (the usage about what the run's first request holds)."""
    return APIS[api].stream(list(text), list(calls), usage)


def make_model(api: str, server: ScriptedServer, **options: Any) -> Any:
    options.setdefault("max_retries", 0)
    return APIS[api].model("test-model", base_url=server.url, api_key=TEST_KEY, **options)


def run_against(api: str, *replies: Reply, model_options: dict[str, Any] | None = None, **options: Any) -> Any:
    with ScriptedServer(*replies) as server:
        result = asyncio.run(run("hi", model=make_model(api, server, **(model_options or {})), **options))
    return result, server


def ended_cleanly(result: Any, status: str) -> None:
    """The run ended with ``status``, a one-line message of ours, and a valid history."""
    assert result.status == status, result.summary
    validate_history(result.history)
    assert "\n" not in result.detail and len(result.detail) < 400 and "Traceback" not in result.detail
    assert TEST_KEY not in result.detail and TEST_KEY not in json.dumps(result.history)


parametrize_apis = pytest.mark.parametrize("api", list(APIS))


# -- the transport ----------------------------------------------------------------------------------------------


@parametrize_apis
def test_a_connection_cut_before_the_first_event_ends_the_run_as_fatal_error(api: str):
    result, _ = run_against(api, Reply(answer(api), cut_after=0))
    ended_cleanly(result, "fatal_error")
    assert "connection" in result.detail and "RemoteProtocolError" in result.detail


@parametrize_apis
@pytest.mark.parametrize("at", [1, 3], ids=["after-one-event", "mid-text"])
def test_a_connection_cut_in_the_middle_of_the_answer_ends_the_run_as_fatal_error(api: str, at: int):
    result, _ = run_against(api, Reply(answer(api), cut_after=at))
    ended_cleanly(result, "fatal_error")
    assert "connection" in result.detail and "RemoteProtocolError" in result.detail
    assert result.answer is None and [item["role"] for item in result.history] == ["user"]


@parametrize_apis
def test_a_connection_cut_after_the_last_event_loses_nothing(api: str):
    events = answer(api)
    result, _ = run_against(api, Reply(events, cut_after=len(events)))
    ended_cleanly(result, "complete")
    assert result.answer == "".join(ANSWER) and result.usage.estimated_requests == 0


@parametrize_apis
def test_a_stream_that_ends_before_its_last_event_is_a_fatal_error(api: str):
    events = answer(api)
    result, _ = run_against(api, Reply(events[:3]))  # the body ends cleanly, the answer does not
    ended_cleanly(result, "fatal_error")
    assert "ended before" in result.detail


@parametrize_apis
def test_no_server_at_all_is_a_fatal_error_after_the_retries(api: str):
    with ScriptedServer() as server:
        url = server.url
    model = APIS[api].model("test-model", base_url=url, api_key=TEST_KEY, max_retries=1, timeout=2.0)
    result = asyncio.run(run("hi", model=model))
    ended_cleanly(result, "fatal_error")
    assert "connection" in result.detail


@parametrize_apis
def test_errors_until_the_retries_are_exhausted_end_the_run_as_fatal_error(api: str):
    body = {"type": "error", "error": {"type": "api_error", "message": "busy"}}
    busy = Reply(status=500, body=body, headers={"retry-after-ms": "1"})
    result, server = run_against(api, busy, busy, busy, model_options={"max_retries": 2})
    ended_cleanly(result, "fatal_error")
    assert len(server.requests) == 3 and "HTTP 500 after 2 retries: busy" in result.detail


class OddWindowServer(ScriptedServer):
    """Answers the window questions (llama.cpp's ``/props``, ``/v1/models``) with JSON of the wrong shape."""

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return 200, {"default_generation_settings": ["n_ctx", 4096], "data": 5, "n_ctx": "a lot"}


@parametrize_apis
def test_a_server_that_answers_the_window_question_oddly_still_runs(api: str):
    with OddWindowServer(Reply(answer(api))) as server:
        result = asyncio.run(run("hi", model=make_model(api, server)))
    ended_cleanly(result, "complete")


def test_a_model_whose_window_question_raises_still_runs():
    from agentkernel import ScriptedModel

    class Asking(ScriptedModel):
        async def discover_context_window(self) -> int | None:
            raise RuntimeError("no idea")

    result = asyncio.run(run("hi", model=Asking(["Hello."])))
    ended_cleanly(result, "complete")


# -- events no adapter can read ---------------------------------------------------------------------------------

ON_FIRE = {"type": "error", "error": {"type": "overloaded_error", "message": "the server is on fire"},
           "message": "the server is on fire", "code": "server_error", "sequence_number": 9}
MALFORMED: dict[str, Callable[[str], str]] = {
    "not JSON": lambda api: APIS[api].event("{this is not json"),
    "an object of the wrong shape": lambda api: APIS[api].event(json.dumps(
        {"type": APIS[api].delta, "index": "zero", "delta": 7, "choices": "x", "item_id": None})),
    "an error event": lambda api: (f"event: error\ndata: {json.dumps(ON_FIRE)}\n\n" if api != "chat"
                                   else f"data: {json.dumps({'error': ON_FIRE['error']})}\n\n"),
}


@parametrize_apis
@pytest.mark.parametrize("bad", list(MALFORMED))
def test_an_event_no_adapter_can_read_ends_the_run_as_fatal_error(api: str, bad: str):
    events = answer(api)
    result, _ = run_against(api, Reply([*events[:3], MALFORMED[bad](api), *events[3:]]))
    ended_cleanly(result, "fatal_error")
    assert result.detail.startswith("the model API")
    if bad == "an error event":
        assert "the server is on fire" in result.detail


@parametrize_apis
@pytest.mark.parametrize("data", ["42", "[]", '"text"', "null", json.dumps({"type": "an.event.of.tomorrow"})])
def test_an_event_that_is_not_one_the_adapter_knows_is_passed_over(api: str, data: str):
    """What an API may add later (or a value that is no event at all) is left alone: the answer arrives whole."""
    events = answer(api)
    result, _ = run_against(api, Reply([*events[:3], APIS[api].event(data), *events[3:]]))
    ended_cleanly(result, "complete")
    assert result.answer == "".join(ANSWER)


CALL_FIELDS = {"responses": {"id": "call_id", "name": "name", "arguments": "arguments"},
               "chat": {"id": "id", "name": "name", "arguments": "arguments"},
               "anthropic": {"id": "id", "name": "name", "arguments": "partial_json"}}


def odd_call(api: str, events: list[str], field: str, value: Any) -> list[str]:
    """``events`` with their tool call's ``field`` (``id``, ``name``, ``arguments``) made ``value``."""
    key = CALL_FIELDS[api][field]

    def change(data: Any) -> Any:
        if isinstance(data, dict):
            if key in data and (data.get("type") in ("function_call", "tool_use", "input_json_delta")
                                or "index" in data or "arguments" in data):
                data[key] = value
            for inner in data.values():
                change(inner)
        elif isinstance(data, list):
            for inner in data:
                change(inner)
        return data

    changed = []
    for event in events:
        head, data = _split(event)
        changed.append(event if data is None else _join(head, change(data)))
    return changed


@parametrize_apis
@pytest.mark.parametrize("field", ["id", "name", "arguments"])
@pytest.mark.parametrize("value", [{"a": 1}, [1], 5, 3.5, True, None], ids=repr)
def test_a_tool_call_whose_id_name_or_arguments_is_not_text_ends_the_run_cleanly(api: str, field: str, value: Any):
    events = odd_call(api, answer(api, [], [("call_1", "lookup", '{"word": "cat"}')]), field, value)
    result, _ = run_against(api, Reply(events), Reply(answer(api, ["Done."])), tools=[lookup_tool()])
    if value is None:  # taken as empty (an id is made up, an empty name is no tool) or, in a delta, unreadable
        ended_cleanly(result, "complete" if result.status == "complete" else "fatal_error")
    else:
        ended_cleanly(result, "fatal_error")
        assert "cannot read" in result.detail


# -- tool arguments ----------------------------------------------------------------------------------------------

ARGUMENTS = {
    "not JSON": '{"word": "cat"',
    "not an object": '["cat"]',
    "nested 100,000 levels deep": '{"word": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested 900 levels deep": '{"word": ' + "[" * 900 + "]" * 900 + "}",
}


@parametrize_apis
@pytest.mark.parametrize("arguments", list(ARGUMENTS))
def test_tool_arguments_that_cannot_be_used_fail_that_call_and_the_run_goes_on(api: str, arguments: str):
    call = Reply(answer(api, [], [("call_1", "lookup", ARGUMENTS[arguments])]))
    result, server = run_against(api, call, Reply(answer(api, ["Done."])), tools=[lookup_tool()])
    ended_cleanly(result, "complete")
    assert result.answer == "Done." and len(server.requests) == 2  # the next request was built and sent
    output = result.history[-2]["output"]
    assert output.startswith("error") and "lookup" in output, output


# -- a model that fails its own way ------------------------------------------------------------------------------


class Failing:
    """A model of one's own that raises ``error`` after a piece of text (not a ModelError)."""

    name = "failing"

    def __init__(self, error: BaseException):
        self.error = error

    async def stream(self, request: Any) -> Any:
        from agentkernel.models import TextDelta

        yield TextDelta("Hel")
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("boom"), RecursionError("maximum recursion depth exceeded"),
                                   KeyError("usage"), ValueError(f"bad key {TEST_KEY}")], ids=type)
def test_a_model_that_raises_anything_ends_the_run_as_fatal_error_naming_it(error: Exception, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    result = asyncio.run(run("hi", model=Failing(error)))
    ended_cleanly(result, "fatal_error")
    assert result.detail.startswith(f"the model failing failed: {type(error).__name__}: ")


def test_an_error_in_a_listener_is_not_called_a_model_fault():
    def listener(event: object) -> None:
        raise LookupError("the listener's own bug")

    with ScriptedServer(Reply(answer("chat"))) as server, pytest.raises(LookupError):
        asyncio.run(run("hi", model=make_model("chat", server), on_event=listener))


# -- Stop and the wall clock in the middle of an answer ----------------------------------------------------------

SLOW = [f"word{i} " for i in range(300)]


@parametrize_apis
def test_stop_in_the_middle_of_an_answer_ends_the_run_as_aborted_with_its_text(api: str):
    stop = StopSignal()
    pressing = StopAfterText(stop, delay=0.2)
    result, server = run_against(api, Reply(answer(api, SLOW), delay=0.005), stop=stop, on_event=pressing)
    ended_cleanly(result, "aborted")
    assert result.answer and "".join(SLOW).startswith(result.answer) and result.answer != "".join(SLOW)
    assert result.usage.estimated_requests == result.usage.requests == 1
    assert server.disconnected.wait(5)


@parametrize_apis
def test_the_wall_clock_in_the_middle_of_an_answer_ends_the_run_as_hit_wall_clock(api: str):
    result, server = run_against(api, Reply(answer(api, SLOW), delay=0.005), limits=Limits(max_seconds=0.4))
    ended_cleanly(result, "hit_wall_clock")
    assert result.usage.estimated_requests == 1 and 0 < result.usage.output_tokens
    assert server.disconnected.wait(5)


# -- usage that is missing or lies -------------------------------------------------------------------------------

FIELDS = {"responses": ("input_tokens", "output_tokens"), "chat": ("prompt_tokens", "completion_tokens"),
          "anthropic": ("input_tokens", "output_tokens")}


def _split(event: str) -> tuple[str, Any]:
    head, _, data = event.partition("data: ")
    return head, json.loads(data) if data.strip() != "[DONE]" else None


def _join(head: str, data: Any) -> str:
    return f"{head}data: {json.dumps(data)}\n\n"


def lie(api: str, events: list[str], how: str, value: Any = None) -> list[str]:
    """``events`` with their usage changed: ``absent`` (none at all; Responses ``usage: null``), ``late`` (after the
    stream's end), ``usage`` (the whole usage object is ``value``), ``input`` / ``output`` (that count is ``value``).
    """
    out: list[str] = []
    later: list[str] = []
    for event in events:
        head, data = _split(event)
        if not isinstance(data, dict):
            out.append(event)
            continue
        kind = data.get("type")
        if api == "responses" and kind in ("response.completed", "response.incomplete"):
            holder, key = data["response"], "usage"
        elif api == "chat" and "usage" in data and not data["choices"]:
            holder, key = data, "usage"
        elif api == "anthropic" and kind == "message_start":
            holder, key = data["message"], "usage"
        elif api == "anthropic" and kind == "message_delta":
            holder, key = data, "usage"
        else:
            out.append(event)
            continue
        usage = holder[key]
        if how == "late":
            if kind != "message_start":  # the final count comes after the stream's end
                later.append(_join(head, data))
                if api == "chat":
                    continue
                holder[key] = None
        elif how == "absent":
            if api == "chat":
                continue  # the usage chunk is not sent (a server that ignores include_usage)
            holder[key] = None
        elif how == "usage":
            holder[key] = value
        else:
            name = FIELDS[api][how == "output"]
            if name in usage and not (api == "anthropic" and kind == "message_start" and how == "output"):
                usage[name] = value
        out.append(_join(head, data))
    return [*out, *later]


LIES: dict[str, tuple[str, Any]] = {
    "absent": ("absent", None),
    "late": ("late", None),
    "null": ("usage", None),
    "a string": ("input", "12abc"),
    "a negative output": ("output", -995),
    "a huge input": ("input", 10**12),
    "a float": ("input", 3.5),
    "a bool": ("output", True),
    "a list": ("usage", [1, 2]),
}


def _lie_cases() -> list[Any]:
    cases = []
    for api in APIS:
        for name in LIES:
            marks = [pytest.mark.skip(reason="a Responses stream has no place after its end")] \
                if (api, name) == ("responses", "late") else []
            cases.append(pytest.param(api, name, id=f"{api}-{name}", marks=marks))
    return cases


@pytest.mark.parametrize(("api", "name"), _lie_cases())
def test_usage_that_is_missing_or_cannot_be_right_is_estimated(api: str, name: str):
    how, value = LIES[name]
    events = lie(api, answer(api, ["x" * 400], usage=(999, 999)), how, value)
    result, _ = run_against(api, Reply(events), price=Price(1.0, 1.0))
    ended_cleanly(result, "complete")
    usage = result.usage
    if (api, name) == ("anthropic", "late"):  # the count came after message_stop: it is still the message's
        assert usage.estimated_requests == 0 and usage.output_tokens == 999
        return
    assert usage.requests == usage.estimated_requests == 1
    assert 100 <= usage.output_tokens <= 200 and 50 < usage.input_tokens < 999  # 400 characters; the system prompt
    assert usage.cost == pytest.approx((usage.input_tokens + usage.output_tokens) / 1e6)
    assert "the response had no usable token count from the server; its tokens are estimated" in result.summary


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**15, 10**15) | st.floats(allow_nan=True)
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


@pytest.fixture(scope="module")
def shared():
    """One server, one event loop and one model per adapter for every example (an SDK client is slow to make)."""
    loop = asyncio.new_event_loop()
    with ScriptedServer() as server:
        yield server, loop, {api: make_model(api, server) for api in APIS}
    loop.close()


@parametrize_apis
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["input", "output", "usage"]), value=JSON)
def test_any_json_in_the_usage_is_believed_only_when_it_can_be_a_count(api: str, field: str, value: Any, shared: Any):
    """Whatever JSON a server puts in the usage, the run completes; the counts it ends with are whole numbers and
    priced; a value that is not a count (or far more than the request holds) is estimated, a small count believed."""
    server, loop, models = shared
    server.add(Reply(lie(api, answer(api, ["x" * 400], usage=(120, 110)), field, value)))
    result = loop.run_until_complete(run("hi", model=models[api], price=Price(1.0, 1.0)))
    ended_cleanly(result, "complete")
    usage = result.usage
    assert all(is_count(getattr(usage, name)) for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                             "cache_write_tokens", "reasoning_tokens"))
    assert usage.cost is not None and math.isfinite(usage.cost) and usage.cost >= 0
    assert usage.requests == 1
    count = value if field != "usage" else None
    # An SDK may read true as 1 and 500.0 as 500; then it is held against the request like any count.
    loose = is_count(count) or isinstance(count, bool) or (isinstance(count, float) and count.is_integer()
                                                            and count >= 0)
    if not loose or count > 10**9 or count < 6:  # 6: a sixteenth of the 400 characters streamed, as tokens
        assert usage.estimated_requests == 1, (value, usage)
    elif is_count(count) and 20 <= count <= 1000:
        assert usage.estimated_requests == 0 and getattr(usage, f"{field}_tokens") == count, (value, usage)


# -- --max-cost holds within one response, whatever the usage ----------------------------------------------------

PAGE = "All happy families are alike; each unhappy family is unhappy in its own way. " * 8
SYSTEM = "You read books carefully and answer in one sentence. " * 60


@tool
def page(n: int) -> str:
    """Read page n of the book."""
    return f"page {n}: {PAGE}"


def reader(body: dict[str, Any], tokens: int) -> Answer:
    """Read a page a round, for ever (the budget ends the run)."""
    n = json.dumps(body).count(PAGE[:40])
    return Answer(calls=[(f"call_{n}", "page", json.dumps({"n": n}))])


class LyingServer(CachingServer):
    """The OpenAI loopback server (its tokenizer counts 3 characters a token, the client's estimate 4) whose every
    answer's usage lies as ``how`` says."""

    def __init__(self, api: str, how: str, value: Any):
        super().__init__(reader, cache=False)
        self.api, self.how, self.value = api, how, value
        self.outputs: list[int] = []

    def answer_reply(self, chat: bool, body: dict[str, Any], prompt_tokens: int, answer: Answer,
                     cached: int = 0, cut: bool = False) -> Reply:
        reply = super().answer_reply(chat, body, prompt_tokens, answer, cached, cut)
        self.outputs.append(answer.tokens())
        return Reply(lie(self.api, reply.events, self.how, self.value))

    def true_costs(self, price: Price) -> list[float]:
        return [price.cost(UsageEvent(m.prompt_tokens, out)) for m, out in zip(self.measured, self.outputs,
                                                                                strict=True)]


class LyingAnthropicServer(AnthropicCachingServer):
    def __init__(self, how: str, value: Any):
        self.outputs: list[int] = []

        def answered(body: dict[str, Any], tokens: int) -> Answer:
            given = reader(body, tokens)
            self.outputs.append(given.tokens())
            return given

        super().__init__(answered, cache=False)
        self.how, self.value = how, value

    def next_reply(self, received: Any) -> Reply:
        return Reply(lie("anthropic", super().next_reply(received).events, self.how, self.value))

    def true_costs(self, price: Price) -> list[float]:
        return [price.cost(UsageEvent(total, out)) for (total, _, _), out in zip(self.measured, self.outputs,
                                                                                  strict=True)]


@pytest.mark.parametrize(("api", "name"), [case for case in _lie_cases() if case.values[1] in (
    "absent", "late", "null", "a string", "a negative output", "a huge input")])
def test_max_cost_holds_within_one_response_whatever_the_usage(api: str, name: str):
    how, value = LIES[name]
    price, budget = Price(10.0, 10.0), 0.2
    server = LyingAnthropicServer(how, value) if api == "anthropic" else LyingServer(api, how, value)
    with server:
        result = asyncio.run(run("Read the book.", model=make_model(api, server), tools=[page], price=price,
                                 system=SYSTEM, limits=Limits(max_cost=budget)))
    assert result.status == "hit_cost_cap", result.summary
    costs = server.true_costs(price)
    assert len(costs) >= 5  # it ran: the budget was not tripped by a lie
    assert budget / 2 < sum(costs) <= budget + max(costs), (sum(costs), budget)  # the server's own count
    assert result.usage.cost <= budget
    if name != "late" or api != "anthropic":
        assert result.usage.estimated_requests == result.usage.requests == len(costs)
