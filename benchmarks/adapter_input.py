"""The adapters' own work per request as the history grows: each history item converted once vs rebuilt each time.

Not a test: run ``python benchmarks/adapter_input.py``. For histories of 10, 100 and 1000 items it times one
request's input conversion as the loop causes it (two items appended since the last request: a call and its
output) for the three adapters, next to converting the whole history again (what the adapters did before). The
cached figure should stay flat; the full one grows with the history. The SDK's own serialisation of the request
(inherent, and the same either way) is not included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentkernel.models._api import InputCache
from agentkernel.models.anthropic_messages import add_message, with_breakpoints
from agentkernel.models.openai_chat import add_chat_message, chat_messages
from agentkernel.models.openai_responses import responses_input, responses_item

SIZES = [10, 100, 1000]
REQUESTS = 50


def history_of(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "go"}]
    while len(items) < n:
        i = len(items)
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "read_file", "arguments": '{"path": "a"}'})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "contents " * 20})
    return items[:n]


def per_request(n: int, convert: Callable[[list[dict[str, Any]]], Any]) -> float:
    """µs per request at a history of about ``n`` items, appending a call and its output before each request."""
    history = history_of(n)
    convert(history)
    extra = history_of(2 * REQUESTS + 1)[1:]
    best = float("inf")
    for _ in range(5):
        del history[n:]
        convert(history)
        start = time.perf_counter()
        for i in range(0, 2 * REQUESTS, 2):
            history.extend(extra[i:i + 2])
            convert(history)
        best = min(best, (time.perf_counter() - start) / REQUESTS * 1e6)
    return best


def main() -> None:
    responses_cache = InputCache(lambda converted, item: converted.append(responses_item(item)))
    chat_cache = InputCache(add_chat_message)
    anthropic_cache = InputCache(add_message)
    ways = {
        "responses, each item once": responses_cache.convert,
        "responses, whole history": responses_input,
        "chat, each item once": lambda history: [{"role": "system", "content": "s"}, *chat_cache.convert(history)],
        "chat, whole history": lambda history: chat_messages("s", history),
        # with the two prompt-cache breakpoints each request marks (on copies of two messages)
        "anthropic, each item once": lambda history: with_breakpoints(anthropic_cache.convert(history)),
    }
    print(f"µs per request (best of 5 × {REQUESTS} requests, 2 items added before each)")
    print(f"{'history starts at':28}" + "".join(f"{n:>10} items" for n in SIZES) + f"{'1000/10':>10}")
    for name, convert in ways.items():
        figures = [per_request(n, convert) for n in SIZES]
        print(f"{name:28}" + "".join(f"{f:>16.1f}" for f in figures) + f"{figures[-1] / figures[0]:>10.1f}×")


if __name__ == "__main__":
    main()
