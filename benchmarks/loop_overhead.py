"""Per-round overhead of the agent loop itself, for runs of 10, 100 and 1000 tool rounds.

Not a test: run ``python benchmarks/loop_overhead.py``. Each run is a scripted model calling a no-op tool with
different arguments every round (so no guard trips), with the transcript off. The time per round should stay
flat as runs get longer: the loop must not copy the history per round and each guard check is O(1) per call.
"""

from __future__ import annotations

import asyncio
import time

from agentkernel import Call, ScriptedModel, run, tool


@tool
async def noop(i: int) -> str:
    """Do nothing, quickly (async, so the figures show the loop rather than thread hand-offs)."""
    return "ok"


async def one_run(rounds: int) -> float:
    script = [Call("noop", {"i": i}) for i in range(rounds)] + ["done"]
    start = time.perf_counter()
    result = await run("go", model=ScriptedModel(script), tools=[noop])
    elapsed = time.perf_counter() - start
    assert result.status == "complete" and result.tool_calls == rounds, result.summary
    return elapsed


async def measure(sizes: list[int], repeats: int) -> dict[int, float]:
    """Best time per model request (µs) for each run length; sizes are interleaved so machine noise hits all."""
    await one_run(100)  # warm up
    best = dict.fromkeys(sizes, float("inf"))
    for _ in range(repeats):
        for rounds in sizes:
            best[rounds] = min(best[rounds], await one_run(rounds) / (rounds + 1) * 1e6)
    return best


def main() -> None:
    results = asyncio.run(measure([10, 100, 1000], repeats=7))
    base = results[10]
    print(f"{'rounds':>7} {'µs/round':>10} {'vs 10':>7}")
    for rounds, us in results.items():
        print(f"{rounds:>7} {us:>10.1f} {us / base:>6.2f}x")


if __name__ == "__main__":
    main()
