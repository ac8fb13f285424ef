"""Do the prompt caches hit? The share of input tokens served from cache, and the cost with caching ÷ without, over a
long run through each adapter.

Not a test: run ``PYTHONPATH=. python benchmarks/prompt_cache.py`` (``--help`` for the settings). Each adapter
runs the same ``--rounds``-round run (one tool call a round reading ``--chunk-chars`` characters, then an answer)
through the real SDK against the loopback server of ``tests/support/cache_server.py``, which caches prompt prefixes
the way OpenAI documents it (hits on the longest common prefix with an earlier request, from 1024 tokens on, in
steps of 128) and reports them in ``usage`` as OpenAI does. With ``--window`` the run's view is compacted on the way
(old outputs elided, then older turns summarised), which re-cuts the prefix, so the compactions' misses count. The
same run against the same server without a cache gives the cost without caching. Both are priced with genai-prices
(gpt-5-mini at OpenAI, claude-sonnet-4-5 at Anthropic). The Anthropic adapter's server caches as Anthropic documents
it instead: each ``cache_control`` breakpoint writes the prefix up to it, and a request reads the longest prefix an
earlier one wrote (writes cost 1.25 × the input price, reads 0.1 ×).

Goal: at least 0.9 of the input tokens cached over the run, and the cost at most 0.25 × the uncached run's.

Another adapter is one more entry in :data:`ADAPTERS`: a function making its model for a server, and the server
(a loopback server of its API with that provider's caching rules, e.g. Anthropic's ``cache_control`` breakpoints and
``cache_read_input_tokens``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from cache_server import AnthropicCachingServer, CachingServer  # noqa: E402
from openai_server import TEST_KEY, Answer  # noqa: E402

from agentkernel import AnthropicMessagesModel, OpenAIChatModel, OpenAIResponsesModel, run, tool  # noqa: E402
from agentkernel.record.context import SUMMARY_INSTRUCTION  # noqa: E402
from agentkernel.usage import dollars  # noqa: E402

SYSTEM = ("You are a careful analyst of sensor logs. Read the chunks you are asked about one at a time, note "
          "anomalies, and answer in one paragraph. ") * 12


@dataclass
class Adapter:
    """How to run one adapter against a caching loopback server of its API, priced as its provider's ``model``."""

    model: Callable[[str, Any], Any]  # (model name, server) -> model
    server: Callable[..., Any]  # (reply, cache=bool, window=int) -> a started-on-enter server
    name: str  # the model priced, unless --model names another for the OpenAI adapters


ADAPTERS: dict[str, Adapter] = {
    "responses": Adapter(lambda name, server: OpenAIResponsesModel(name, base_url=server.url, api_key=TEST_KEY,
                                                                   price_provider="openai"), CachingServer,
                         "gpt-5-mini"),
    "chat": Adapter(lambda name, server: OpenAIChatModel(name, base_url=server.url, api_key=TEST_KEY,
                                                         price_provider="openai"), CachingServer, "gpt-5-mini"),
    "anthropic": Adapter(lambda name, server: AnthropicMessagesModel(name, base_url=server.url, api_key=TEST_KEY,
                                                                     price_provider="anthropic"),
                         lambda reply, cache, window: AnthropicCachingServer(reply, cache=cache), "claude-sonnet-4-5"),
}


def chunk_text(n: int, chars: int) -> str:
    """``chars`` characters of made-up log lines that differ for every ``n``."""
    lines = [f"{n:04d}.{i:02d} sensor={n * 7 % 13} reading={(n * 31 + i * 17) % 997} status=ok" for i in range(chars)]
    return "\n".join(lines)[:chars]


def history_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body.get("messages") or body.get("input") or []


def reply_for(rounds: int) -> Callable[[dict[str, Any], int], Answer]:
    """The server's model: a summary when asked for one, else read the next chunk until ``rounds``, then answer."""
    def reply(body: dict[str, Any], tokens: int) -> Answer:
        history = history_of(body)
        last = history[-1] if history else {}
        if SUMMARY_INSTRUCTION[:40] in json.dumps(last.get("content", "")):
            return Answer(["Read chunks so far; all readings normal."], output_tokens=40)
        read = sum(item.get("role") == "tool" or item.get("type") == "function_call_output" for item in history)
        read += json.dumps(history).count('"tool_result"')  # Anthropic's, inside user messages
        done = json.dumps(history).count("read_chunk")  # calls seen, also those folded into a summary
        n = max(read, done // 2)
        if n < rounds:
            return Answer(calls=[(f"call_{n}", "read_chunk", json.dumps({"n": n}))], output_tokens=30)
        return Answer(["All chunks read: no anomalies."], output_tokens=30)

    return reply


async def one_run(adapter: Adapter, name: str, args: argparse.Namespace, cache: bool) -> Any:
    @tool
    def read_chunk(n: int) -> str:
        """Read chunk n of the sensor log."""
        return chunk_text(n, args.chunk_chars)

    with adapter.server(reply_for(args.rounds), cache=cache, window=args.window or 10**9) as server:
        model = adapter.model(name, server)
        try:
            return await run("Read the log chunk by chunk and report anomalies.", model=model, tools=[read_chunk],
                             system=SYSTEM, context_window=args.window or None)
        finally:
            await model.client.close()  # before the event loop ends, not at garbage collection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--chunk-chars", type=int, default=1500)
    parser.add_argument("--window", type=int, default=32_000, help="context window in tokens (0: none)")
    parser.add_argument("--model", help="the OpenAI adapters' model, priced with genai-prices at OpenAI "
                        "(default gpt-5-mini; the Anthropic adapter's is claude-sonnet-4-5)")
    parser.add_argument("--adapters", default=",".join(ADAPTERS))
    args = parser.parse_args()
    print(f"{args.rounds} rounds of {args.chunk_chars} characters, window {args.window or 'none'}")
    print(f"{'adapter':<10} {'model':<18} {'requests':>8} {'compactions':>11} {'input tokens':>12} {'cached':>7} "
          f"{'cost cached':>11} {'uncached':>9} {'ratio':>6} {'seconds':>7}")
    for key in args.adapters.split(","):
        started = time.perf_counter()
        adapter = ADAPTERS[key]
        name = args.model if args.model and key != "anthropic" else adapter.name
        cached = asyncio.run(one_run(adapter, name, args, cache=True))
        uncached = asyncio.run(one_run(adapter, name, args, cache=False))
        seconds = time.perf_counter() - started
        usage = cached.usage
        assert cached.status == uncached.status == "complete", (cached.summary, uncached.summary)
        assert usage.input_tokens == uncached.usage.input_tokens  # the same run, the same requests
        print(f"{key:<10} {name:<18} {usage.requests:>8} {cached.compactions:>11} {usage.input_tokens:>12,} "
              f"{usage.cached_share:>7.3f} {dollars(usage.cost):>11} {dollars(uncached.usage.cost):>9} "
              f"{usage.cost / uncached.usage.cost:>6.3f} {seconds:>7.1f}")


if __name__ == "__main__":
    main()
