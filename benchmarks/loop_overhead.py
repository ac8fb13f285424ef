"""Per-round overhead of the agent loop, side by side with a bare asyncio loop doing the same work.

Not a test: run ``PYTHONPATH=. python benchmarks/loop_overhead.py``. Each run is a scripted model calling a no-op
tool with different arguments every round (so no guard trips), with the transcript off. The bare loop does what
every agent loop must: stream one call from an async generator, parse its arguments, await the tool and append the
call and its output to a history. Both run in this process, interleaved, timed in this process's CPU time (both
are CPU-bound), best of seven, so the figures and their ratio hold on a busy machine.
The time per round should stay flat as runs get longer: the loop must not copy the history per round and each
guard check is O(1) per call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from agentkernel import Call, ScriptedModel, run, tool


@tool
async def noop(i: int) -> str:
    """Do nothing, quickly (async, so the figures show the loop rather than thread hand-offs)."""
    return "ok"


async def agentkernel_run(rounds: int) -> float:
    script = [Call("noop", {"i": i}) for i in range(rounds)] + ["done"]
    start = time.process_time()
    result = await run("go", model=ScriptedModel(script), tools=[noop])
    elapsed = time.process_time() - start
    assert result.status == "complete" and result.tool_calls == rounds, result.summary
    return elapsed


async def bare_run(rounds: int) -> float:
    """The same rounds with nothing but asyncio: the floor any loop in this process stands on."""

    async def model(i: int) -> AsyncIterator[tuple[str, str, str]]:
        if i < rounds:
            yield f"call_{i}", "noop", json.dumps({"i": i})

    async def bare_noop(i: int) -> str:
        return "ok"

    start = time.process_time()
    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "go"}]
    for i in range(rounds + 1):
        calls = [c async for c in model(i)]
        for call_id, name, arguments in calls:
            history.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
            output = await bare_noop(**json.loads(arguments))
            history.append({"type": "function_call_output", "call_id": call_id, "output": output})
    elapsed = time.process_time() - start
    assert len(history) == 2 * rounds + 1
    return elapsed


async def measure(sizes: list[int], repeats: int) -> dict[int, tuple[float, float]]:
    """Best µs per model request for each run length, agentkernel and bare; interleaved so noise hits both."""
    await agentkernel_run(100)  # warm up
    await bare_run(100)
    best = {n: (float("inf"), float("inf")) for n in sizes}
    for _ in range(repeats):
        for rounds in sizes:
            ours = await agentkernel_run(rounds) / (rounds + 1) * 1e6
            bare = await bare_run(rounds) / (rounds + 1) * 1e6
            best[rounds] = (min(best[rounds][0], ours), min(best[rounds][1], bare))
    return best


def main() -> None:
    results = asyncio.run(measure([10, 100, 1000], repeats=7))
    base = results[10][0]
    print(f"{'rounds':>7} {'µs/round':>10} {'vs 10':>7} {'bare µs':>9} {'vs bare':>8}")
    for rounds, (ours, bare) in results.items():
        print(f"{rounds:>7} {ours:>10.1f} {ours / base:>6.2f}x {bare:>9.1f} {ours / bare:>7.0f}x")


if __name__ == "__main__":
    main()
