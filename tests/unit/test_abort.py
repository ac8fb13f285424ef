"""Stopping a run from outside: the stop signal (a UI click, a timer, SIGINT) and task cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import calls, outputs
from timing import until

from agentkernel import STATUSES, AgentLoop, Call, ScriptedModel, StopSignal, Turn, run, tool, validate_history
from agentkernel.events import ToolCallFinished, ToolCallStarted
from agentkernel.loop import ABORTED_OUTPUT

PROMPT = 0.2  # how soon after the signal the run must have returned


@tool
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@tool
def quick(n: int) -> str:
    """Answer at once."""
    return f"quick {n}"


async def run_with_stop_after(delay: float, **options) -> tuple:
    """Run the loop, setting the stop signal from another thread after ``delay`` s, as a Stop click would."""
    stop = StopSignal()
    timer = threading.Timer(delay, stop.set)
    start = time.monotonic()
    timer.start()
    try:
        result = await run("go", stop=stop, **options)
    finally:
        timer.cancel()
    return result, time.monotonic() - start


def test_stop_from_the_event_loop_reaches_a_run_whose_model_and_tools_never_wait():
    """A Stop click in a kernel is handled by the event loop the run shares: the run must let it in now and then
    even when nothing it awaits ever waits (else it would only stop at its natural end, here seconds away)."""

    @tool
    async def instant(i: int) -> str:
        """Answer without ever waiting."""
        return "ok"

    def script(request):  # a different call each round, so no guard trips; an answer after 200,000 rounds
        rounds = len(request.history) // 2
        return Call("instant", {"i": rounds}) if rounds < 200_000 else "done"

    async def main() -> tuple:
        stop = StopSignal()
        asyncio.get_running_loop().call_later(0.1, stop.set)  # runs only when the event loop gets a turn
        start = time.monotonic()
        result = await run("go", model=ScriptedModel(script), tools=[instant], stop=stop)
        return result, time.monotonic() - start

    result, elapsed = asyncio.run(main())
    assert result.status == "aborted" and result.tool_calls > 0
    assert elapsed < 0.1 + PROMPT
    validate_history(result.history)


def test_abort_during_a_model_stream():
    model = ScriptedModel([Turn(text="word " * 200, delay=0.02)])
    result, elapsed = asyncio.run(run_with_stop_after(0.15, model=model))
    assert result.status == "aborted"
    assert result.detail == "aborted by user"
    assert 0.15 <= elapsed < 0.15 + PROMPT
    # The text streamed before the click is kept; the run did not stream to the end.
    text = result.history[-1]["content"]
    assert text.startswith("word") and len(text.split()) < 100
    validate_history(result.history)


def test_abort_during_a_model_stream_drops_calls_not_yet_committed():
    turn = Turn(text="Looking around", calls=[Call("quick", {"n": i}) for i in range(50)], delay=0.02)
    result, elapsed = asyncio.run(run_with_stop_after(0.2, model=ScriptedModel([turn]), tools=[quick]))
    assert result.status == "aborted"
    assert elapsed < 0.2 + PROMPT
    assert calls(result.history) == [] and outputs(result.history) == []
    validate_history(result.history)


def test_abort_during_a_slow_tool():
    model = ScriptedModel([[Call("quick", {"n": 1}), Call("slow", {"seconds": 30}), Call("quick", {"n": 2})],
                           "never"])
    result, elapsed = asyncio.run(run_with_stop_after(0.15, model=model, tools=[quick, slow]))
    assert result.status == "aborted"
    assert 0.15 <= elapsed < 0.15 + PROMPT
    got = {o["call_id"]: o for o in outputs(result.history)}
    first, slow_call, last = calls(result.history)
    assert got[first["call_id"]]["output"] == "quick 1"
    assert got[slow_call["call_id"]] == {"type": "function_call_output", "call_id": slow_call["call_id"],
                                         "output": ABORTED_OUTPUT, "synthetic": True}
    assert got[last["call_id"]]["output"] == "quick 2"
    assert [f["output"] for f in result.partial_findings] == ["quick 1", "quick 2"]
    validate_history(result.history)


def test_abort_while_a_sync_tool_is_blocked_in_its_thread():
    release = threading.Event()

    @tool
    def blocked() -> str:
        """Wait on something that never comes (until the test releases it)."""
        release.wait(10)
        return "released"

    async def main():
        try:
            return await run_with_stop_after(0.1, model=ScriptedModel([Call("blocked"), "never"]), tools=[blocked])
        finally:
            release.set()  # the abandoned thread may end now, so the event loop can shut down

    result, elapsed = asyncio.run(main())
    assert result.status == "aborted"
    assert elapsed < 0.1 + PROMPT
    assert outputs(result.history)[-1]["output"] == ABORTED_OUTPUT
    validate_history(result.history)


def test_abort_while_waiting_for_approval():
    async def approve(call, t):
        await asyncio.sleep(30)  # the user never answers
        return True

    @tool(read_only=False)
    def delete(path: str) -> str:
        """Delete a file."""
        raise AssertionError("must not run")

    model = ScriptedModel([Call("delete", {"path": "x"}), "never"])
    result, elapsed = asyncio.run(run_with_stop_after(0.1, model=model, tools=[delete], approve=approve))
    assert result.status == "aborted"
    assert elapsed < 0.1 + PROMPT
    assert outputs(result.history)[-1]["output"] == ABORTED_OUTPUT
    validate_history(result.history)


def test_stop_reason_is_reported():
    async def main():
        stop = StopSignal()
        asyncio.get_running_loop().call_later(0.05, stop.set, "interrupted (SIGINT)")
        stop_later = await run("go", model=ScriptedModel([Call("slow", {"seconds": 5})]), tools=[slow], stop=stop)
        return stop_later

    result = asyncio.run(main())
    assert (result.status, result.detail) == ("aborted", "interrupted (SIGINT)")
    assert result.summary.endswith("ABORTED after 1 round and 1 tool call: interrupted (SIGINT).")


def test_cancelling_the_task_leaves_a_result_with_a_valid_history(tmp_path):
    path = tmp_path / "t.jsonl"
    heard: list[object] = []
    loop = AgentLoop(ScriptedModel([[Call("quick", {"n": 1}), Call("slow", {"seconds": 30})], "never"]),
                     tools=[quick, slow], transcript=path, on_event=heard.append)

    def under_way() -> bool:  # quick has its output and slow has started
        return (any(isinstance(e, ToolCallFinished) and e.result.call.name == "quick" for e in heard)
                and any(isinstance(e, ToolCallStarted) and e.call.name == "slow" for e in heard))

    async def main():
        task = asyncio.create_task(loop.run("go"))
        await until(under_way, "quick answered and slow started")
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "not cancelled"

    assert asyncio.run(main()) == "cancelled"  # the cancellation still propagates to the caller
    result = loop.result
    assert result is not None and result.status == "aborted"
    validate_history(result.history)
    assert [o["output"] for o in outputs(result.history)][0] == "quick 1"
    assert outputs(result.history)[1]["synthetic"] is True
    assert result.partial_findings == [{"tool": "quick", "arguments": '{"n": 1}', "output": "quick 1"}]
    # The transcript holds the outputs too, so the run can be resumed from it.
    from agentkernel import load_transcript

    assert load_transcript(path) == result.history


def test_stop_signal_from_another_thread_wakes_every_waiter():
    stop = StopSignal()

    async def main():
        waiters = [asyncio.create_task(stop.wait()) for _ in range(3)]
        await until(lambda: len(stop._waiters) == 3, "three waiters waiting")
        threading.Thread(target=stop.set).start()
        await asyncio.wait_for(asyncio.gather(*waiters), 1.0)
        await stop.wait()  # already set: returns at once
        return stop._waiters

    assert asyncio.run(main()) == []
    assert stop.is_set()


def test_stop_signal_can_be_set_by_a_handler_that_interrupts_its_own_thread():
    # A SIGINT handler runs on the thread that runs the event loop, between any two bytecodes - possibly while
    # that thread is inside the signal's own locked section. Simulate exactly that: set() while holding the lock.
    stop = StopSignal()

    def interrupted_inside_the_lock():
        with stop._lock:
            stop.set("interrupted (SIGINT)")

    worker = threading.Thread(target=interrupted_inside_the_lock, daemon=True)
    worker.start()
    worker.join(1.0)
    assert not worker.is_alive(), "set() deadlocked on the signal's own lock"
    assert stop.is_set() and stop.reason == "interrupted (SIGINT)"


# -- property: aborting anywhere keeps the invariant ----------------------------------------------------------

turns = st.one_of(
    st.builds(lambda words, d: Turn(text=" ".join(["w"] * words), delay=d),
              st.integers(1, 5), st.sampled_from([0.0, 0.002, 0.005])),
    st.builds(lambda ns, d, secs: Turn(calls=[Call("quick", {"n": n}) if s == 0 else
                                              Call("slow", {"seconds": s}) for n, s in zip(ns, secs, strict=False)],
                                       delay=d),
              st.lists(st.integers(0, 1000), min_size=1, max_size=4), st.sampled_from([0.0, 0.002]),
              st.lists(st.sampled_from([0, 0.002, 0.01]), min_size=4, max_size=4)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(turns, min_size=1, max_size=6), stop_at=st.floats(0.0, 0.05))
def test_aborting_at_any_point_keeps_the_history_valid(script, stop_at):
    async def main():
        stop = StopSignal()
        asyncio.get_running_loop().call_later(stop_at, stop.set)
        return await run("go", model=ScriptedModel(script + ["the end"]), tools=[quick, slow], stop=stop)

    result = asyncio.run(main())
    assert result.status in STATUSES
    validate_history(result.history)
    assert len(outputs(result.history)) == len(calls(result.history))
    assert result.requires_human == (result.status != "complete")
