"""One test per stop condition and budget, plus the guards' unit behaviour."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import calls, output_of, outputs, run_sync

from agentkernel import (
    Call,
    GuardConfig,
    Limits,
    ScriptedModel,
    StopSignal,
    ToolCall,
    Turn,
    run,
    tool,
    validate_history,
)
from agentkernel.events import RoundStarted, ToolCallFinished
from agentkernel.guards import NoProgressGuard, RepeatedCallGuard, normalize_arguments


@tool
def read_file(path: str, limit: int = 20) -> str:
    """Read a file."""
    return f"contents of {path}"


counter = itertools.count()


@tool
def fresh(path: str) -> str:
    """Return a different output every time."""
    return f"{path} at tick {next(counter)}"


@tool
def broken(path: str) -> str:
    """Always fails."""
    raise OSError(f"disk on fire reading {path}")


@tool
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


def reads(*paths: str) -> list[Call]:
    return [Call("read_file", {"path": p}) for p in paths]


# -- endings --------------------------------------------------------------------------------------------------


def test_complete():
    result = run_sync("hi", model=ScriptedModel([Call("read_file", {"path": "a"}), "Done."]), tools=[read_file])
    assert (result.status, result.answer, result.requires_human) == ("complete", "Done.", False)
    validate_history(result.history)


def test_aborted_by_a_stop_signal_set_before_the_run():
    stop = StopSignal()
    stop.set("user clicked Stop")
    model = ScriptedModel(["never asked"])
    result = run_sync("hi", model=model, stop=stop)
    assert result.status == "aborted"
    assert result.detail == "user clicked Stop"
    assert model.requests == 0
    assert result.requires_human


def test_aborted_between_rounds():
    stop = StopSignal()

    def on_event(event):
        if isinstance(event, RoundStarted) and event.round == 2:
            stop.set()

    model = ScriptedModel([Call("read_file", {"path": "a"}), Turn(text="never streamed", delay=0.01)])
    result = run_sync("hi", model=model, tools=[read_file], stop=stop, on_event=on_event)
    assert result.status == "aborted"
    assert result.rounds == 2
    assert result.history[-1] == {"type": "function_call_output", "call_id": calls(result.history)[0]["call_id"],
                                  "output": "contents of a"}
    validate_history(result.history)


def test_fatal_error_when_the_model_fails():
    result = run_sync("hi", model=ScriptedModel([Turn(error="401 Unauthorized")]))
    assert result.status == "fatal_error"
    assert "401 Unauthorized" in result.detail
    assert result.summary.startswith("Stopped with FATAL_ERROR")


def test_repeated_tool_call_counts_full_signatures():
    result = run_sync("hi", model=ScriptedModel(reads("a.ts", "a.ts", "a.ts", "a.ts")), tools=[read_file])
    assert result.status == "repeated_tool_call"
    assert result.tool_calls == 3
    validate_history(result.history)


def test_repeated_tool_call_limit_is_configurable():
    model = ScriptedModel(reads("a.ts", "a.ts", "a.ts", "a.ts", "a.ts", "a.ts"))
    # (Identical turns would trip the no-progress guard first, so that one is off here.)
    result = run_sync("hi", model=model, tools=[read_file], guards=GuardConfig(repeat_limit=5, max_stale_turns=0))
    assert result.status == "repeated_tool_call"
    assert result.tool_calls == 5


def test_key_order_is_normalized_for_the_repeated_call_guard():
    script = [
        Call("read_file", '{"path":"a.ts","limit":20}'),
        Call("read_file", '{"limit":20,"path":"a.ts"}'),
        Call("read_file", '{ "limit": 20, "path": "a.ts" }'),
        "unreachable",
    ]
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "repeated_tool_call"
    assert result.tool_calls == 3


def test_nested_key_order_is_normalized():
    assert normalize_arguments('{"b": {"y": 1, "x": [{"q": 1, "p": 2}]}, "a": 0}') == normalize_arguments(
        '{"a": 0, "b": {"x": [{"p": 2, "q": 1}], "y": 1}}'
    )
    assert normalize_arguments('{"a": [1, 2]}') != normalize_arguments('{"a": [2, 1]}')
    # A call's arguments are normalized once, when the call is made; the guards compare that form.
    first, second = ToolCall("1", "t", '{"o": {"b": 1, "a": 2}}'), ToolCall("2", "t", '{"o": {"a": 2, "b": 1}}')
    guard = RepeatedCallGuard(2)
    assert guard.record("t", first.normalized, "out") is None
    trip = guard.record("t", second.normalized, "out")
    assert trip is not None and trip.status == "repeated_tool_call"


def test_same_tool_with_different_files_is_not_a_repeat():
    script = reads("a.ts", "b.ts", "c.ts", "d.ts", "e.ts") + ["done"]
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "complete"
    assert result.tool_calls == 5


def test_same_call_with_different_output_is_not_a_repeat():
    guard = RepeatedCallGuard(3)
    assert all(guard.record("fresh", '{"path": "log"}', f"line {i}") is None for i in range(10))
    # Through the loop: the same call three times, but the output changes each time.
    script = [Call("fresh", {"path": "log"})] * 3 + ["the log keeps growing"]
    result = run_sync("hi", model=ScriptedModel(script), tools=[fresh])
    assert result.status == "complete"


def test_no_hash_so_different_calls_never_merge():
    guard = RepeatedCallGuard(2)
    assert guard.record("t", '{"a": 1}', "x") is None
    assert guard.record("t", '{"a": 2}', "x") is None
    assert guard.record("u", '{"a": 1}', "x") is None
    assert guard.record("t", '{"a": 1}', "y") is None


def test_no_progress_on_a_cycle_of_period_two_with_varying_outputs():
    script = [Call("fresh", {"path": "a"}), Call("fresh", {"path": "b"})] * 10
    result = run_sync("hi", model=ScriptedModel(script), tools=[fresh])
    assert result.status == "no_progress"
    assert result.tool_calls == 8  # the default window
    assert "cycle of 2" in result.detail
    validate_history(result.history)


def test_no_progress_on_a_cycle_of_period_three_inside_parallel_rounds():
    script = [[Call("fresh", {"path": "a"}), Call("fresh", {"path": "b"}), Call("fresh", {"path": "c"})]] * 5
    result = run_sync("hi", model=ScriptedModel(script), tools=[fresh], guards=GuardConfig(stuck_window=6))
    assert result.status == "no_progress"
    assert result.rounds == 2
    validate_history(result.history)


def test_no_progress_window_unit():
    guard = NoProgressGuard(window=6, max_stale_turns=None)
    seq = ["x", "a", "b", "c", "a", "b", "c"]
    trips = [guard.record_call("t", f'{{"p": "{p}"}}') for p in seq]
    assert trips[:6] == [None] * 6  # the window holds x a b c a b: not a cycle
    assert trips[6] is not None and "cycle of 3" in trips[6].detail
    # The detection keeps working after the window has slid far along.
    guard = NoProgressGuard(window=3, max_stale_turns=None)
    trips = [guard.record_call("t", f'{{"p": {i}}}') for i in range(50)]
    trips += [guard.record_call("t", "{}") for _ in range(3)]
    assert trips[:52] == [None] * 52 and trips[52] is not None and "cycle of 1" in trips[52].detail
    guard = NoProgressGuard(window=4, max_stale_turns=None)
    assert all(guard.record_call("t", f'{{"p": {i}}}') is None for i in range(100))


def test_no_progress_after_three_empty_turns():
    model = ScriptedModel([Turn(), Turn(), Turn(), "never"])
    result = run_sync("hi", model=model)
    assert result.status == "no_progress"
    assert model.requests == 3
    assert "empty" in result.detail


def test_identical_turns_with_varying_outputs_are_progress_until_the_cycle_window():
    # Polling: the same call getting a new output each time is not a stale turn, and not a repeat. Only the
    # call-cycle window (8 calls on name + arguments alone) ends it.
    script = [Turn(text="Let me look again.", calls=[Call("fresh", {"path": "x"})])] * 20
    result = run_sync("hi", model=ScriptedModel(script), tools=[fresh])
    assert result.status == "no_progress"
    assert result.rounds == 8
    assert "cycle of 1" in result.detail
    assert not outputs(result.history)[-1]["output"].startswith("not run")
    validate_history(result.history)


def test_no_progress_on_identical_turns_with_identical_outputs():
    script = [Turn(text="Let me look again.", calls=[Call("read_file", {"path": "x"})])] * 10
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file], guards=GuardConfig(repeat_limit=0))
    assert result.status == "no_progress"
    assert result.rounds == 4  # the fourth turn is the third in a row identical to the one before
    assert "repeated the one before" in result.detail
    validate_history(result.history)


def test_tool_failure_when_every_call_fails_round_after_round():
    script = reads("a", "b", "c", "d", "e")
    result = run_sync("hi", model=ScriptedModel([Call("broken", {"path": c.arguments["path"]}) for c in script]),
                      tools=[broken])
    assert result.status == "tool_failure"
    assert result.rounds == 3
    assert all(o["output"].startswith("error: OSError: disk on fire") for o in outputs(result.history))
    assert result.partial_findings == []
    validate_history(result.history)


def test_one_successful_call_resets_the_failure_count():
    script = [Call("broken", {"path": "1"}), Call("broken", {"path": "2"}), Call("read_file", {"path": "ok"}),
              Call("broken", {"path": "3"}), Call("broken", {"path": "4"}), "done"]
    result = run_sync("hi", model=ScriptedModel(script), tools=[broken, read_file])
    assert result.status == "complete"


# -- budgets --------------------------------------------------------------------------------------------------


def test_hit_iteration_cap():
    model = ScriptedModel(reads(*"abcdefgh") + ["done"])
    result = run_sync("hi", model=model, tools=[read_file], limits=Limits(max_iterations=4))
    assert result.status == "hit_iteration_cap"
    assert result.rounds == 4 and model.requests == 4
    assert len(outputs(result.history)) == 4  # the last round's tools ran and are committed
    validate_history(result.history)


def test_hit_token_cap():
    # The scripted model counts 10 output tokens per call plus the words of recent items as input.
    model = ScriptedModel(reads(*"abcdefgh") + ["done"])
    result = run_sync("hi", model=model, tools=[read_file], limits=Limits(max_tokens=30))
    assert result.status == "hit_token_cap"
    assert result.usage.total_tokens >= 30
    assert 1 <= result.rounds < 8
    validate_history(result.history)
    # The calls of the response that went over budget never ran: they say so, and are marked not_run.
    last = result.history[-1]
    assert last["type"] == "function_call_output" and last["synthetic"]
    assert last["output"] == "not run: the loop stopped (HIT_TOKEN_CAP)"


def test_hit_wall_clock_mid_stream():
    model = ScriptedModel([Turn(text="word " * 100, delay=0.05)])
    start = time.monotonic()
    result = run_sync("hi", model=model, limits=Limits(max_seconds=0.3))
    elapsed = time.monotonic() - start
    assert result.status == "hit_wall_clock"
    assert elapsed < 0.3 + 1.0
    assert 0.25 <= elapsed
    # What streamed before the cut is kept as the assistant's partial text.
    assert result.history[-1]["role"] == "assistant" and result.history[-1]["content"].startswith("word")
    validate_history(result.history)


def test_hit_wall_clock_mid_tool():
    model = ScriptedModel([Call("read_file", {"path": "a"}), Call("slow", {"seconds": 30}), "never"])
    start = time.monotonic()
    result = run_sync("hi", model=model, tools=[read_file, slow], limits=Limits(max_seconds=0.3))
    elapsed = time.monotonic() - start
    assert result.status == "hit_wall_clock"
    assert elapsed < 0.3 + 1.0
    last = result.history[-1]
    assert last["type"] == "function_call_output" and last.get("synthetic") is True
    assert result.partial_findings == [{"tool": "read_file", "arguments": '{"path": "a"}', "output": "contents of a"}]
    validate_history(result.history)


def test_hit_wall_clock_mid_sync_tool():
    release = threading.Event()

    @tool
    def blocking() -> str:
        """Block in a worker thread."""
        release.wait(10)
        return "finally"

    async def main():
        start = time.monotonic()
        result = await run("hi", model=ScriptedModel([Call("blocking"), "never"]), tools=[blocking],
                           limits=Limits(max_seconds=0.3))
        elapsed = time.monotonic() - start
        release.set()  # let the abandoned thread end so the event loop can shut down
        return result, elapsed

    result, elapsed = asyncio.run(main())
    assert result.status == "hit_wall_clock"
    assert elapsed < 0.3 + 1.0
    validate_history(result.history)


def test_hit_tool_call_cap():
    script = [reads("a", "b"), reads("c", "d", "e", "f"), "never"]
    finished = []
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file], limits=Limits(max_tool_calls=4),
                      on_event=lambda e: finished.append(e.result.status) if isinstance(e, ToolCallFinished) else None)
    assert result.status == "hit_tool_call_cap"
    assert result.tool_calls == 4
    round2 = [output_of(result.history, c["call_id"]) for c in calls(result.history)[2:]]
    not_run = "not run: tool-call budget exhausted"
    assert [o["output"] for o in round2] == ["contents of c", "contents of d", not_run, not_run]
    assert [o.get("synthetic", False) for o in round2] == [False, False, True, True]  # written by the runtime
    # The UI hears of every call, in request order: the calls that ran, then those the budget refused.
    assert finished == ["ok", "ok", "ok", "ok", "not_run", "not_run"]
    assert [f["output"] for f in result.partial_findings] == [f"contents of {p}" for p in "abcd"]
    validate_history(result.history)


def test_tool_call_cap_reached_exactly_lets_the_model_answer():
    script = [reads("a", "b"), "done"]
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file], limits=Limits(max_tool_calls=2))
    assert result.status == "complete"


# -- switching guards off -------------------------------------------------------------------------------------


@pytest.mark.parametrize("off", [None, 0])
def test_guards_switched_off(off):
    guards = GuardConfig(repeat_limit=off, stuck_window=off, max_stale_turns=off, max_consecutive_failures=off)
    script = reads(*["a.ts"] * 12) + [Turn()] * 5 + [Call("broken", {"path": "x"})] * 5 + ["done"]
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file, broken], guards=guards,
                      limits=Limits(max_iterations=off, max_tokens=off, max_seconds=off, max_tool_calls=off))
    assert result.status == "complete"
    assert result.tool_calls == 17
    validate_history(result.history)


def cycle_in_window(window: int, calls: list[str]) -> int | None:
    """The definition, checked the slow way: the smallest period 1-3 with which the last `window` calls repeat."""
    last = calls[-window:]
    if len(last) < window:
        return None
    for period in (1, 2, 3):
        if period < window and all(last[i] == last[i - period] for i in range(period, window)):
            return period
    return None


@settings(max_examples=200, deadline=None)
@given(window=st.integers(1, 10), calls=st.lists(st.sampled_from("abcd"), max_size=30))
def test_no_progress_guard_matches_its_definition(window, calls):
    guard = NoProgressGuard(window, max_stale_turns=None)
    for k in range(1, len(calls) + 1):
        trip = guard.record_call("read_file", json.dumps({"path": calls[k - 1]}))
        expected = cycle_in_window(window, calls[:k])
        assert (trip is None) == (expected is None)
        if trip:
            assert f"cycle of {expected}:" in trip.detail
