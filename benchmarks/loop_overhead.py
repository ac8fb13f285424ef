"""Per-round overhead of the agent loop, side by side with a bare asyncio loop doing the same work.

Not a test: run ``PYTHONPATH=. python benchmarks/loop_overhead.py``. Each run is a scripted model calling a no-op
tool with different arguments every round (so no guard trips), with the transcript off. The bare loop does what
every agent loop must: stream one call from an async generator, parse its arguments, await the tool and append the
call and its output to a history. Both run in this process, interleaved, timed in this process's CPU time (both
are CPU-bound), best of seven, so the figures and their ratio hold on a busy machine.
The time per round should stay flat as runs get longer: the loop must not copy the history per round and each
guard check is O(1) per call.

The main figures are for an async tool. A sync tool runs in a worker thread of its own per call (so Stop can
abandon one that hangs); the ``sync tool`` row is that case, beside a bare loop that also starts a thread per call.

The ``end to end`` row is what a user's own ``asyncio.run(run(...))`` costs with ``run()``'s defaults: a fresh event
loop each time, the script made inside the timing, an async ``@tool`` (with its default timeout), every guard on,
and a tool output of 60 characters redacted against a set of three secrets; the bare loop beside it also gets a
fresh event loop and returns the same text.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from agentkernel import Call, ScriptedModel, run, secrets, tool


@tool
async def noop(i: int) -> str:
    """Do nothing, quickly (async, so the figures show the loop rather than thread hand-offs)."""
    return "ok"


@tool(name="noop")
def noop_sync(i: int) -> str:
    """Do nothing, quickly, in a worker thread."""
    return "ok"


@tool(name="noop")
async def noop_line(i: int) -> str:
    """Return a line of 60 characters."""
    return line(i)


def line(i: int) -> str:
    return f"row {i:>6}: " + "x" * 48


def end_to_end(rounds: int) -> float:
    start = time.process_time()
    script = [Call("noop", {"i": i}) for i in range(rounds)] + ["done"]
    result = asyncio.run(run("go", model=ScriptedModel(script), tools=[noop_line]))
    elapsed = time.process_time() - start
    assert result.status == "complete" and result.tool_calls == rounds, result.summary
    return elapsed


def bare_end_to_end(rounds: int) -> float:
    start = time.process_time()
    asyncio.run(bare_run(rounds, make_output=line))
    return time.process_time() - start


async def agentkernel_run(rounds: int, sync: bool = False, window: int | None = None) -> float:
    script = [Call("noop", {"i": i}) for i in range(rounds)] + ["done"]
    start = time.process_time()
    result = await run("go", model=ScriptedModel(script), tools=[noop_sync if sync else noop], context_window=window)
    elapsed = time.process_time() - start
    assert result.status == "complete" and result.tool_calls == rounds, result.summary
    assert window is None or result.compactions > 0
    return elapsed


async def bare_run(rounds: int, sync: bool = False, make_output: Any = None) -> float:
    """The same rounds with nothing but asyncio: the floor any loop in this process stands on."""

    async def model(i: int) -> AsyncIterator[tuple[str, str, str]]:
        if i < rounds:
            yield f"call_{i}", "noop", json.dumps({"i": i})

    async def bare_noop(i: int) -> str:
        if not sync:
            return "ok" if make_output is None else make_output(i)
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        threading.Thread(target=lambda: loop.call_soon_threadsafe(done.set_result, "ok")).start()
        return await done

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


SYNC = "1000, sync tool"
WINDOW = "1000, 4k window"
"""A 4,096-token context window: the view is compacted (summarised: "ok" outputs are too short to elide) every
140 rounds or so, so the row shows what building and compacting the model's view adds to a round."""


async def measure(sizes: list[int], repeats: int) -> dict[int | str, tuple[float, float]]:
    """Best µs per model request for each run length, agentkernel and bare; interleaved so noise hits both."""
    await agentkernel_run(100)  # warm up
    await bare_run(100)
    rows = [*sizes, WINDOW, SYNC]
    best: dict[int | str, tuple[float, float]] = {n: (float("inf"), float("inf")) for n in rows}
    for _ in range(repeats):
        for rounds in rows:
            n, sync = (1000, True) if rounds == SYNC else (1000, False) if rounds == WINDOW else (int(rounds), False)
            ours = await agentkernel_run(n, sync, 4096 if rounds == WINDOW else None) / (n + 1) * 1e6
            bare = await bare_run(n, sync) / (n + 1) * 1e6
            best[rounds] = (min(best[rounds][0], ours), min(best[rounds][1], bare))
    return best


END_TO_END = "1000, end to end"


TRACED = ("no listener", "spans", "the record", "the record and spans")
"""What listens to the traced rows' runs: nobody; the OpenTelemetry spans alone; what ``%%agent`` always has (the
record's timeline and a transcript on disk); both."""


async def traced_run(rounds: int, listening: str, folder: str) -> float:
    """A run as :func:`agentkernel_run`'s, heard as ``listening`` (one of :data:`TRACED`) says. The spans go through
    a ``BatchSpanProcessor`` (as the provider agentkernel makes does) to an in-memory exporter, flushed inside the
    timing, so the export's work is counted too."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentkernel.listeners.timeline import Timeline
    from agentkernel.listeners.tracing import RunSpans
    from agentkernel.listeners.transcript import Transcript

    script = [Call("noop", {"i": i}) for i in range(rounds)] + ["done"]
    model = ScriptedModel(script)
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exported))
    listeners: list[Any] = []
    if "record" in listening:
        listeners += [Timeline(), Transcript(f"{folder}/run.jsonl")]
    if "spans" in listening:
        listeners.append(RunSpans(model, provider=provider))
    start = time.process_time()
    result = await run("go", model=model, tools=[noop], on_event=listeners)
    provider.force_flush()
    elapsed = time.process_time() - start
    provider.shutdown()
    assert result.status == "complete"
    assert len(exported.get_finished_spans()) == (2 * rounds + 2 if "spans" in listening else 0)
    return elapsed


async def measure_tracing(rounds: int, repeats: int) -> dict[str, float]:
    """Best µs per round of a run heard as each of :data:`TRACED` says, interleaved."""
    import tempfile

    best = dict.fromkeys(TRACED, float("inf"))
    with tempfile.TemporaryDirectory() as folder:
        for listening in TRACED:  # warm up
            await traced_run(100, listening, folder)
        for _ in range(repeats):
            for listening in TRACED:
                best[listening] = min(best[listening], await traced_run(rounds, listening, folder))
    return {listening: b / (rounds + 1) * 1e6 for listening, b in best.items()}


def measure_end_to_end(rounds: int, repeats: int) -> tuple[float, float]:
    """Best µs per model request of :func:`end_to_end` and its bare twin, interleaved."""
    for value, name in (("sk-proj-" + "Q7" * 20, "OPENAI_API_KEY"), ("ghp_" + "z9" * 18, "GITHUB_TOKEN"),
                        ("postgres-password-" + "w" * 12, "PGPASSWORD")):
        secrets.add(value, name)
    end_to_end(100)  # warm up
    bare_end_to_end(100)
    ours, bare = float("inf"), float("inf")
    for _ in range(repeats):
        ours, bare = min(ours, end_to_end(rounds)), min(bare, bare_end_to_end(rounds))
    return ours / (rounds + 1) * 1e6, bare / (rounds + 1) * 1e6


def main() -> None:
    results = asyncio.run(measure([10, 100, 1000], repeats=7))
    results[END_TO_END] = measure_end_to_end(1000, repeats=7)
    base = results[10][0]
    print(f"{'rounds':>15} {'µs/round':>10} {'vs 10':>7} {'bare µs':>9} {'vs bare':>8}")
    for rounds, (ours, bare) in results.items():
        print(f"{rounds:>15} {ours:>10.1f} {ours / base:>6.2f}x {bare:>9.1f} {ours / bare:>7.1f}x")
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        print("tracing: not measured (pip install 'jupyter-agentkernel[otel]')")
        return
    traced = asyncio.run(measure_tracing(1000, repeats=7))
    off, record = traced["no listener"], traced["the record"]
    print(f"tracing, 1000 rounds, µs/round: off {off:.1f}, spans to memory {traced['spans']:.1f} "
          f"({traced['spans'] / off:.2f}x off); with the record as %%agent keeps it {record:.1f}, and spans "
          f"{traced['the record and spans']:.1f} ({traced['the record and spans'] / record:.2f}x)")

if __name__ == "__main__":
    main()
