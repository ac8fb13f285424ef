"""The LLM gateway's budget: ``/key/info`` read over HTTP, and a "budget exceeded" answer ending the run as
``gateway_budget`` with its partial result, against a loopback server that answers as the LiteLLM proxy does."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from gateway_server import GatewayServer, budget_body
from hypothesis import given
from hypothesis import strategies as st
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_events, responses_events

from agentkernel import run, tool, validate_history
from agentkernel.gateway import KeyBudget, info_url, is_budget_refusal, parse_key_info, read_key_budget
from agentkernel.models import OpenAIChatModel, OpenAIResponsesModel


@tool
def lookup(word: str) -> str:
    """Look a word up."""
    return f"{word} means something"


def test_the_key_info_url_is_at_the_gateway_root():
    assert info_url("http://127.0.0.1:4000/v1") == "http://127.0.0.1:4000/key/info"
    assert info_url("http://127.0.0.1:4000/v1/") == "http://127.0.0.1:4000/key/info"
    assert info_url("https://llm.example.edu/litellm") == "https://llm.example.edu/litellm/key/info"


def test_the_key_budget_is_read_with_the_key_and_nothing_else_is_kept():
    with GatewayServer(TEST_KEY, max_budget=1.0, cost=0.1, spend=0.25) as gateway:
        budget = read_key_budget(gateway.url, TEST_KEY)
        assert budget == KeyBudget(0.25, 1.0) and budget.left == 0.75
        assert budget.line() == "the gateway key has spent $0.2500 of $1.0000 ($0.7500 left)"
        assert TEST_KEY not in repr(budget)
        assert read_key_budget(gateway.url, "sk-another-key-of-someone") is None  # 401: no budget to show
    with GatewayServer(TEST_KEY, max_budget=None, cost=0.1) as gateway:
        budget = read_key_budget(gateway.url, TEST_KEY)
        assert budget is not None and budget.left is None and "no budget" in budget.line()


def test_a_server_that_is_no_gateway_has_no_key_budget():
    with ScriptedServer() as server:  # a plain OpenAI-compatible server: 404
        assert read_key_budget(server.url, TEST_KEY) is None
    with socket.socket() as s:  # nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert read_key_budget(f"http://127.0.0.1:{port}/v1", TEST_KEY, timeout=2) is None


def test_a_gateway_that_never_answers_costs_its_timeout_and_no_budget():
    with socket.socket() as listener:  # accepts the connection (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        started = time.monotonic()
        assert read_key_budget(url, TEST_KEY, timeout=0.5) is None
        assert time.monotonic() - started < 5


def test_the_run_budget_caps_the_cost_and_refuses_a_spent_key():
    from agentkernel.errors import AgentConfigError
    from agentkernel.gateway import RunBudget
    from agentkernel.usage import Limits

    with GatewayServer(TEST_KEY, max_budget=1.0, cost=0.1, spend=0.75) as gateway:
        model = OpenAIChatModel("gpt-4.1-mini", base_url=gateway.url, api_key=TEST_KEY)
        budget = RunBudget.read(model)
        assert budget is not None and budget.before.left == 0.25
        assert budget.cap(Limits()).max_cost == 0.25 and budget.cap(Limits(max_cost=0.1)).max_cost == 0.1
        assert budget.cap(Limits(max_cost=3.0)).max_cost == 0.25
        gateway.spend = 1.25
        assert budget.after_line() == ("the gateway key has spent $1.2500 of $1.0000 ($0.0000 left); this run: "
                                       "$0.5000")
        with pytest.raises(AgentConfigError, match=r"^GATEWAY_BUDGET: the gateway key has spent \$1.2500 of "):
            RunBudget.read(model)
    class Counting(ScriptedServer):
        gets = 0

        def get(self, path: str):
            self.gets += 1
            return super().get(path)

    with Counting() as server:  # no gateway: asked once, then left alone
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.url, api_key=TEST_KEY)
        assert RunBudget.read(model) is None and RunBudget.read(model) is None
        assert server.gets == 1
    assert RunBudget.read(OpenAIChatModel("gpt-4.1-mini", api_key=TEST_KEY)) is None  # the OpenAI API itself


json_values = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                       max_size=4), max_leaves=12)


@given(st.dictionaries(st.sampled_from(["spend", "max_budget", "budget_reset_at", "key_name"]), json_values)
       | json_values)
def test_any_answer_gives_a_sane_budget_or_none(info):
    for data in (info, {"key": "sk-x", "info": info}):
        budget = parse_key_info(data)
        if budget is not None:
            assert budget.spend >= 0 and (budget.max_budget is None or budget.max_budget >= 0)
            assert budget.left is None or 0 <= budget.left
            assert "\n" not in budget.line() and len(budget.line()) < 120


@pytest.mark.parametrize("body, text, refused", [
    (budget_body("s1", TEST_KEY, 0.02, 0.01), "", True),
    (budget_body("s1", TEST_KEY, 0.02, 0.01)["error"], "", True),  # the SDK's body is the error object
    ({"error": {"message": "Budget has been exceeded! Current cost: 3, Max budget: 2", "type": "auth_error"}}, "",
     True),  # an older proxy: the type said auth_error, the words say budget
    ({"error": {"message": "Rate limit reached for requests", "type": "rate_limit_error"}}, "", False),
    ({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}, "", False),
    (None, "", False), ("Budget has been exceeded!", "", True), ([], "overloaded", False),
])
def test_budget_refusals_are_told_from_other_refusals(body, text, refused):
    assert is_budget_refusal(body, text) is refused


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_spent_key_ends_the_run_as_gateway_budget_with_its_partial_result(api: str):
    chat = api == "chat"
    call = (chat_events(calls=[("c1", "lookup", ['{"word": "apple"}'])]) if chat
            else responses_events(calls=[("c1", "lookup", '{"word": "apple"}')]))
    answer = chat_events(["done"]) if chat else responses_events(["done"])
    with GatewayServer(TEST_KEY, Reply(call), Reply(answer), max_budget=0.01, cost=0.01) as gateway:
        kind = OpenAIChatModel if chat else OpenAIResponsesModel
        model = kind("gpt-4.1-mini", base_url=gateway.url, api_key=TEST_KEY, max_retries=0)
        result = asyncio.run(run("define apple", model=model, tools=[lookup]))
        assert result.status == "gateway_budget", result.summary
        assert result.detail.startswith("the gateway refused the request: the key's budget is spent (Budget has "
                                        "been exceeded! Key=student-01")
        assert TEST_KEY not in result.detail and TEST_KEY not in json.dumps(result.history)
        assert result.partial_findings == [{"tool": "lookup", "arguments": '{"word": "apple"}',
                                            "output": "apple means something"}]
        assert result.summary.startswith("Stopped with GATEWAY_BUDGET after 2 rounds and 1 tool call")
        validate_history(result.history)
        assert gateway.refused == 1 and len(gateway.requests) == 2


def test_a_recorded_budget_refusal_replays_as_one(tmp_path):
    from agentkernel.models.cassette import RecordingModel, ReplayModel

    cassette = tmp_path / "gateway.jsonl"
    call = Reply(chat_events(calls=[("c1", "lookup", ['{"word": "apple"}'])]))
    with GatewayServer(TEST_KEY, call, max_budget=0.01, cost=0.01) as gateway:
        live = OpenAIChatModel("gpt-4.1-mini", base_url=gateway.url, api_key=TEST_KEY, max_retries=0)
        recorded = asyncio.run(run("define apple", model=RecordingModel(live, str(cassette)), tools=[lookup]))
    replayed = asyncio.run(run("define apple", model=ReplayModel(str(cassette)), tools=[lookup]))
    assert recorded.status == replayed.status == "gateway_budget"
    assert replayed.detail == recorded.detail and replayed.partial_findings == recorded.partial_findings
    assert TEST_KEY not in cassette.read_text()
