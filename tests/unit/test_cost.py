"""Usage as the providers report it, cost (genai-prices or a given price) and the cost budget, through the real openai
SDK against a loopback server with a prompt cache (tests/support/cache_server.py)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from cache_server import CachingServer, prompt_tokens
from openai_server import TEST_KEY, Answer, Reply, ScriptedServer, responses_events

from agentkernel import AgentConfigError, Limits, OpenAIChatModel, OpenAIResponsesModel, Price, StopSignal, run, tool
from agentkernel.events import UsageUpdated
from agentkernel.jupyter.panel import Panel
from agentkernel.jupyter.render import render_text
from agentkernel.listeners.timeline import Timeline
from agentkernel.models.base import UsageEvent
from agentkernel.pricing import catalog_price, parse_price
from agentkernel.usage import Usage

MODEL = "gpt-5-mini"  # priced by genai-prices for the provider openai; its cache reads cost a tenth of its input
PAGE = "All happy families are alike; each unhappy family is unhappy in its own way. " * 8  # ~600 characters


@tool
def page(n: int) -> str:
    """Read page n of the book."""
    return f"page {n}: {PAGE}"


def outputs_in(body: dict[str, Any]) -> int:
    """The tool outputs a request carries (Responses items or Chat tool messages)."""
    if "messages" in body:
        return sum(message.get("role") == "tool" for message in body["messages"])
    return sum(item.get("type") == "function_call_output" for item in body.get("input") or [])


def reader(rounds: int, answer: str = "The book is about families.", output_tokens: int = 20):
    """The server's model: read a page per round for ``rounds`` rounds, then answer."""
    def reply(body: dict[str, Any], tokens: int) -> Answer:
        n = outputs_in(body)
        if n < rounds:
            return Answer(calls=[(f"call_{n}", "page", json.dumps({"n": n}))], output_tokens=output_tokens)
        return Answer([answer], output_tokens=output_tokens)

    return reply


ADAPTERS = {"responses": OpenAIResponsesModel, "chat": OpenAIChatModel}


def model(api: str, server: Any, name: str = MODEL, **options: Any) -> Any:
    options.setdefault("price_provider", "openai")  # a stand-in for the OpenAI API: its prices apply
    return ADAPTERS[api](name, base_url=server.url, api_key=TEST_KEY, **options)


def genai_cost(input_tokens: int, output_tokens: int, cached: int = 0) -> float:
    from genai_prices import Usage as Tokens
    from genai_prices import calc_price

    tokens = Tokens(input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached)
    return float(calc_price(tokens, MODEL, provider_id="openai").total_price)


def run_sync(prompt: str, **options: Any) -> Any:
    return asyncio.run(run(prompt, **options))


SYSTEM = "You read books carefully and answer in one sentence. " * 60  # a long fixed prefix, as real prompts have


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("cache", [True, False], ids=["cached", "uncached"])
def test_usage_and_cost_are_read_from_the_server_and_priced_with_genai_prices(api: str, cache: bool):
    with CachingServer(reader(8), cache=cache) as server:
        result = run_sync("What is the book about?", model=model(api, server), tools=[page], system=SYSTEM)
    assert result.status == "complete", result.summary
    usage = result.usage
    answered = [m.prompt_tokens for m in server.measured]
    assert usage.requests == len(answered) == 9
    assert usage.input_tokens == sum(answered) and usage.output_tokens == 9 * 20
    assert usage.cache_read_tokens == sum(server.cached)
    if cache:
        assert usage.cache_read_tokens > 0.5 * usage.input_tokens  # every request after the first extends one
    else:
        assert usage.cache_read_tokens == 0
    expected = sum(genai_cost(tokens, 20, cached) for tokens, cached in zip(answered, server.cached, strict=True))
    assert usage.cost == pytest.approx(expected, rel=1e-9)
    assert usage.cost == pytest.approx(genai_cost(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens))
    cached = f" ({usage.cache_read_tokens:,} cached)" if cache else ""
    assert usage.line == f"{usage.input_tokens:,} in{cached} · {usage.output_tokens:,} out · ${usage.cost:.4f}"
    assert result.summary == f"Answered after 9 rounds and 8 tool calls. Used {usage.line}."


def test_each_run_sends_its_own_prompt_cache_key_to_openai_and_none_elsewhere():
    with CachingServer(reader(1)) as server:
        first = run_sync("go", model=model("responses", server), tools=[page])
        second = run_sync("go", model=model("chat", server), tools=[page])
        local = run_sync("go", model=model("chat", server, "test-model", price_provider=None), tools=[page])
    keys = [m.received.body.get("prompt_cache_key") for m in server.measured]
    assert keys == [first.run_id] * 2 + [second.run_id] * 2 + [None] * 2
    assert first.run_id != second.run_id
    assert local.usage.cost is None and local.usage.line.endswith(" out · cost unknown")
    assert "Used" not in local.summary  # an unpriced run's summary is as before


def test_a_model_genai_prices_does_not_know_costs_unknown_and_a_given_price_applies():
    with CachingServer(reader(2), cache=False) as server:
        unknown = model("responses", server, "my-finetune", price_provider=None)
        assert catalog_price(unknown) is None
        assert run_sync("go", model=unknown, tools=[page]).usage.cost is None
        price = Price(2.0, 8.0, 0.5)
        result = run_sync("go", model=unknown, tools=[page], price=price)
    usage = result.usage
    assert usage.cost == pytest.approx((usage.input_tokens * 2.0 + usage.output_tokens * 8.0) / 1e6)
    assert catalog_price(model("responses", server)) is not None  # provider openai: gpt-5-mini is listed


def test_price_arithmetic_and_parsing():
    price = Price(1.0, 4.0, 0.1, 1.25)
    event = UsageEvent(input_tokens=1_000_000, output_tokens=10_000, cache_read_tokens=600_000,
                       cache_write_tokens=100_000)
    assert price.cost(event) == pytest.approx(0.3 + 0.06 + 0.125 + 0.04)
    assert parse_price("0") == Price(0, 0)
    assert parse_price("0.4, 1.6") == Price(0.4, 1.6)
    assert parse_price("0.4,1.6,0.1") == Price(0.4, 1.6, 0.1)
    for bad in ("", "1", "a,b", "1,2,3,4", "-1,2", "nan,1"):
        with pytest.raises(AgentConfigError, match=r"--price .* is not a price: give IN,OUT\[,CACHED_IN\]"):
            parse_price(bad)


def test_max_cost_without_a_price_fails_at_once_naming_price():
    with CachingServer(reader(1)) as server:
        unknown = model("responses", server, "my-finetune", price_provider=None)
        with pytest.raises(AgentConfigError, match=r"--max-cost needs a price.*'my-finetune'.*--price IN,OUT"):
            run_sync("go", model=unknown, limits=Limits(max_cost=0.01))
    assert server.requests == []


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_max_cost_stops_before_a_request_it_cannot_afford(api: str):
    price = Price(10.0, 10.0)  # USD per million tokens, input and output alike
    budget = 0.05
    with CachingServer(reader(100), cache=False) as server:
        result = run_sync("go", model=model(api, server, price_provider=None), tools=[page], price=price,
                          limits=Limits(max_cost=budget), system=SYSTEM)
    assert result.status == "hit_cost_cap", result.summary
    assert result.detail.startswith(f"spent ${result.usage.cost:.4f} of a budget of $0.0500; the next request")
    usage = result.usage
    assert usage.cost == pytest.approx(sum(price.cost(UsageEvent(m.prompt_tokens, 20)) for m in server.measured))
    assert usage.cost <= budget  # never over
    # It stopped only when the next request's input alone would not have fitted: that input is the last
    # request's, one page and call longer.
    next_input = server.measured[-1].prompt_tokens + 150
    assert budget - usage.cost < price.cost(UsageEvent(next_input, 0)) * 1.5
    assert len(server.measured) >= 3


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_max_cost_lowers_each_output_cap_to_what_is_left_and_never_overshoots(api: str):
    price = Price(1.0, 1000.0)  # output expensive: the budget runs out in the middle of a long answer
    essay = " ".join(f"word{i}" for i in range(700))  # some 2,000 tokens as the server counts

    def reply(body: dict[str, Any], tokens: int) -> Answer:
        return Answer([essay], output_tokens=1300)

    budget = 0.5
    with CachingServer(reply, cache=False) as server:
        result = run_sync("write an essay", model=model(api, server, price_provider=None, max_output_tokens=4000),
                          price=price, limits=Limits(max_cost=budget))
    assert result.status == "hit_cost_cap", result.summary
    assert "the last response was cut where the budget ended" in result.detail
    (request,) = server.measured
    body = request.received.body
    cap = body.get("max_output_tokens") or body.get("max_tokens")
    # The cap is what the budget leaves after the input, priced as the client estimated it (with its margin).
    assert 0 < cap < 500 and cap == result.usage.output_tokens
    assert result.usage.cost <= budget
    assert budget - result.usage.cost < 2 * price.cost(UsageEvent(request.prompt_tokens, 0)) + 0.001
    assert result.answer and essay.startswith(result.answer)


def test_max_cost_prices_the_input_before_the_first_count_with_room_for_the_tokenizer():
    price = Price(100.0, 1.0)
    with CachingServer(reader(1), cache=False) as server:
        tokens = prompt_tokens({"instructions": SYSTEM, "input": [{"type": "message", "role": "user",
                                                                    "content": "go"}], "tools": []})
        result = run_sync("go", model=model("responses", server, price_provider=None), price=price, system=SYSTEM,
                          limits=Limits(max_cost=price.cost(UsageEvent(tokens, 0)) * 1.1))
    # The server counts 3 characters a token, the client 4: at 1.5 times its estimate the request is not made.
    assert result.status == "hit_cost_cap" and server.measured == []


def test_a_response_cut_by_stop_counts_with_estimated_usage():
    text = [f"word{i} " for i in range(400)]
    reply = Reply(responses_events(text, usage=(999, 999)), delay=0.005)
    with ScriptedServer(reply) as server:
        stop = StopSignal()

        async def main() -> Any:
            asyncio.get_running_loop().call_later(0.4, stop.set, "stopped")
            return await run("go", model=model("responses", server, price_provider=None), stop=stop,
                             price=Price(1.0, 1.0))

        result = asyncio.run(main())
    usage = result.usage
    assert result.status == "aborted" and usage.requests == 1 and usage.estimated_requests == 1
    assert 0 < usage.output_tokens <= len("".join(text)) // 4 and usage.input_tokens > 100  # the system prompt
    assert usage.cost == pytest.approx((usage.input_tokens + usage.output_tokens) / 1e6)
    assert usage.line.endswith(" · the response had no usable token count from the server; its tokens are estimated")


def test_a_response_cut_by_the_wall_clock_counts_with_estimated_usage():
    reply = Reply(responses_events([f"word{i} " for i in range(400)], usage=(999, 999)), delay=0.005)
    with ScriptedServer(reply) as server:
        result = run_sync("go", model=model("responses", server), limits=Limits(max_seconds=0.4))
    usage = result.usage
    assert result.status == "hit_wall_clock" and usage.estimated_requests == 1 and 0 < usage.output_tokens < 999
    assert usage.cost == pytest.approx(genai_cost(usage.input_tokens, usage.output_tokens))


# -- the panel, the static rendering, the summary ----------------------------------------------------------------


def priced_usage() -> Usage:
    usage = Usage(cost=0.0)
    usage.add(UsageEvent(12_345, 1_234, cache_read_tokens=9_876), 0.0123)
    return usage


def test_the_panel_shows_tokens_and_cost_live_with_a_cost_bar():
    panel = Panel(Limits(max_cost=0.05, max_tokens=100_000), StopSignal())
    assert list(panel.bars) == ["tokens", "cost"] and panel.bars["cost"].max == 0.05
    panel(UsageUpdated(priced_usage()))
    panel.refresh()
    assert "12,345 in (9,876 cached) · 1,234 out · $0.0123" in panel.status.value
    assert panel.bars["cost"].value == pytest.approx(0.0123) and panel.bars["tokens"].value == 13_579
    panel(UsageUpdated(Usage(input_tokens=10, output_tokens=2)))
    panel.refresh()
    assert "10 in · 2 out · cost unknown" in panel.status.value


def test_the_rendering_and_the_summary_show_the_cost():
    from agentkernel.result import LoopResult

    result = LoopResult("hit_cost_cap", "partial", [], usage=priced_usage(), rounds=3, tool_calls=2,
                        detail="spent $0.0123 of a budget of $0.0100")
    headline = render_text(result, Timeline()).splitlines()[0]
    assert headline == "agent: hit_cost_cap · 3 rounds · 2 tool calls · 12,345 in (9,876 cached) · 1,234 out · $0.0123"
    assert result.summary == ("Stopped with HIT_COST_CAP after 3 rounds and 2 tool calls: spent $0.0123 of a budget "
                              "of $0.0100. Used 12,345 in (9,876 cached) · 1,234 out · $0.0123.")
    assert "12,345 in (9,876 cached) · 1,234 out · $0.0123" in result._summary_lines()[0]


def test_the_transcript_records_each_requests_usage_and_the_runs(tmp_path):
    path = tmp_path / "run.jsonl"
    with CachingServer(reader(2)) as server:
        result = run_sync("go", model=model("responses", server), tools=[page], transcript=path, system=SYSTEM)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    usages = [r for r in records if r["event"] == "usage"]
    assert [u["input_tokens"] for u in usages] == [m.prompt_tokens for m in server.measured]
    assert [u.get("cache_read_tokens", 0) for u in usages] == server.cached
    finish = records[-1]
    assert finish["event"] == "finish" and finish["usage"]["cost"] == pytest.approx(result.usage.cost)
    assert math.isclose(finish["usage"]["cache_read_tokens"], result.usage.cache_read_tokens)


def test_genai_prices_matches_providers_by_base_url_and_loads_only_when_a_run_is_priced():
    import subprocess
    import sys

    code = """
import sys
import agentkernel, agentkernel.loop, agentkernel.jupyter.magics
from agentkernel import OpenAIChatModel
from agentkernel.pricing import catalog_price
assert "genai_prices" not in sys.modules
known = catalog_price(OpenAIChatModel("llama-3.3-70b-versatile", base_url="https://api.groq.com/openai/v1"))
assert known is not None and known.provider_api_url.startswith("https://api.groq.com"), known
assert catalog_price(OpenAIChatModel("gpt-4.1-mini", base_url="http://localhost:11434/v1")) is None
assert catalog_price(OpenAIChatModel("gpt-4.1-mini")).provider_id == "openai"
"""
    from pathlib import Path

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=Path(__file__).parents[2])


def test_a_cassette_keeps_the_cache_and_reasoning_fields():
    from agentkernel.models.cassette import event_from_dict, event_to_dict

    event = UsageEvent(1000, 50, cache_read_tokens=768, reasoning_tokens=20)
    recorded = event_to_dict(event)
    assert recorded == {"type": "usage", "input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 768,
                        "reasoning_tokens": 20}
    assert event_from_dict(recorded) == event
    assert event_to_dict(UsageEvent(3, 0)) == {"type": "usage", "input_tokens": 3, "output_tokens": 0}  # as before


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_adapters_read_cached_and_reasoning_tokens(api: str):
    from openai_server import chat_events, collect, user_request

    if api == "responses":
        events = responses_events(["hi"], usage=(2048, 40), cached=1920)
        events[-1] = events[-1].replace('"reasoning_tokens": 0', '"reasoning_tokens": 32')
    else:
        events = chat_events(["hi"], usage=(2048, 40), cached=1920)
        events[-2] = events[-2].replace('"prompt_tokens_details"', '"completion_tokens_details": '
                                        '{"reasoning_tokens": 32}, "prompt_tokens_details"')
    with ScriptedServer(Reply(events)) as server:
        usage = [e for e in asyncio.run(collect(model(api, server), user_request())) if isinstance(e, UsageEvent)]
    assert usage == [UsageEvent(2048, 40, cache_read_tokens=1920, reasoning_tokens=32)]


def test_the_cost_budget_holds_across_compactions():
    price = Price(10.0, 10.0)
    with CachingServer(reader(200), window=6000) as server:
        result = run_sync("go", model=model("chat", server, price_provider=None), tools=[page], price=price,
                          context_window=6000, limits=Limits(max_cost=2.0))
    assert result.status == "hit_cost_cap", result.summary
    assert result.compactions >= 2 and not server.refused()
    assert result.usage.cost <= 2.0
    assert result.usage.cost == pytest.approx(
        sum(price.cost(UsageEvent(m.prompt_tokens, 20)) for m in server.measured), rel=0.01)


def test_anthropic_cache_reads_and_writes_are_read_and_priced_with_genai_prices():
    from cache_server import AnthropicCachingServer
    from genai_prices import Usage as Tokens
    from genai_prices import calc_price

    from agentkernel import AnthropicMessagesModel

    def reply(body: dict[str, Any], tokens: int) -> Answer:
        n = json.dumps(body["messages"]).count('"tool_result"')
        return Answer(calls=[(f"toolu_{n}", "page", json.dumps({"n": n}))] if n < 6 else (), text=["Done."],
                      output_tokens=20)

    with AnthropicCachingServer(reply) as server:
        claude = AnthropicMessagesModel("claude-sonnet-4-5", base_url=server.url, api_key=TEST_KEY,
                                        price_provider="anthropic")
        result = run_sync("go", model=claude, tools=[page], system=SYSTEM)
    assert result.status == "complete", result.summary
    usage = result.usage
    totals, reads, writes = zip(*server.measured, strict=True)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (sum(totals), sum(reads),
                                                                                      sum(writes))
    assert sum(reads) > 0.6 * sum(totals) and sum(writes) > 0  # the breakpoints moved on, and were read back
    expected = sum(float(calc_price(Tokens(input_tokens=t, output_tokens=20, cache_read_tokens=r,
                                           cache_write_tokens=w), "claude-sonnet-4-5", provider_id="anthropic")
                         .total_price) for t, r, w in server.measured)
    assert usage.cost == pytest.approx(expected, rel=1e-9)
    assert "cache writes" in usage.line


def test_estimated_responses_are_counted_in_words_in_the_line_the_panel_and_the_summary():
    from agentkernel.result import LoopResult

    def usage(estimated: int, requests: int) -> Usage:
        used = Usage(cost=0.0, requests=requests)
        for n in range(requests):
            used.add(UsageEvent(100, 10, estimated=n < estimated), 0.001)
        return used

    note = "no usable token count from the server;"
    assert usage(0, 3).line == "300 in · 30 out · $0.0030"
    assert usage(1, 1).line.endswith(f" · the response had {note} its tokens are estimated")
    assert usage(1, 5).line.endswith(f" · 1 of 5 responses had {note} its tokens are estimated")
    assert usage(2, 5).line.endswith(f" · 2 of 5 responses had {note} their tokens are estimated")
    assert usage(3, 3).line.endswith(f" · all 3 responses had {note} their tokens are estimated")
    panel = Panel(Limits(max_cost=0.05), StopSignal())
    panel(UsageUpdated(usage(2, 5)))
    panel.refresh()
    assert f"2 of 5 responses had {note} their tokens are estimated" in panel.status.value
    result = LoopResult("complete", "done", [], usage=usage(2, 5), rounds=5)
    assert result.summary.endswith(f"Used {usage(2, 5).line}.")
    assert render_text(result, Timeline()).splitlines()[0].endswith("their tokens are estimated")
