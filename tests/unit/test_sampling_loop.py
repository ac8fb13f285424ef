"""The sampling loop's core promises: no round cap, the repeated-call stop, outputs committed before a stop."""

from __future__ import annotations

from runtime_helpers import calls, outputs, run_sync

from agentkernel import (
    STATUSES,
    Call,
    GuardConfig,
    Limits,
    Price,
    ScriptedModel,
    StopSignal,
    Turn,
    tool,
    validate_history,
)
from agentkernel.models.base import GatewayBudgetError


@tool
def read_file(path: str, limit: int = 20) -> str:
    """Read a file."""
    return f"contents of {path} ({limit} lines)"


def test_allows_more_than_five_tool_rounds_before_the_final_response():
    rounds = 12
    script = [Call("read_file", {"path": f"src/{i}.ts"}) for i in range(rounds)] + ["All twelve files read."]
    result = run_sync("read them all", model=ScriptedModel(script), tools=[read_file])

    assert result.status == "complete"
    assert result.answer == "All twelve files read."
    assert result.rounds == rounds + 1
    assert result.tool_calls == rounds
    assert [o["output"] for o in outputs(result.history)] == [
        f"contents of src/{i}.ts (20 lines)" for i in range(rounds)
    ]
    assert result.history[-1] == {"type": "message", "role": "assistant", "content": "All twelve files read."}
    assert not result.requires_human
    validate_history(result.history)


def test_stops_repeated_identical_tool_call_loops_without_a_global_round_limit():
    # Distinct calls first (more than 5 rounds: there is no round cap), then the same call forever.
    distinct = [Call("read_file", {"path": f"src/{i}.ts"}) for i in range(6)]
    same = [Call("read_file", {"path": "a.ts", "limit": 20}) for _ in range(50)]
    result = run_sync("loop", model=ScriptedModel(distinct + same), tools=[read_file])

    assert result.status == "repeated_tool_call"
    assert result.status.upper() == "REPEATED_TOOL_CALL"
    assert result.summary.startswith("Stopped with REPEATED_TOOL_CALL after ")
    assert result.rounds == 6 + 3  # the third identical call is the one that trips the guard
    assert result.requires_human
    # The call that tripped the guard has its real output committed, and it is the last item of the history.
    last_call, last_output = calls(result.history)[-1], result.history[-1]
    assert last_output["type"] == "function_call_output"
    assert last_output["call_id"] == last_call["call_id"]
    assert last_output["output"] == "contents of a.ts (20 lines)"
    assert "synthetic" not in last_output
    validate_history(result.history)


def test_commits_tool_output_before_fatal_stop():
    script = [
        Call("read_file", {"path": "a.ts"}),
        Call("read_file", {"path": "b.ts"}),
        Turn(error="the API failed after 3 retries"),
    ]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])

    assert result.status == "fatal_error"
    assert "the API failed after 3 retries" in result.detail
    last = result.history[-1]
    assert last["type"] == "function_call_output"
    assert last["output"] == "contents of b.ts (20 lines)"
    assert last["call_id"] == calls(result.history)[-1]["call_id"]
    assert result.partial_findings[-1]["output"] == "contents of b.ts (20 lines)"
    validate_history(result.history)


# -- the escape hatch: what every run returns ------------------------------------------------------------------


@tool
def broken(path: str) -> str:
    """Always fails."""
    raise OSError("unreadable")


def test_loop_result_fields_when_complete():
    script = [
        Turn(text="Reading both.", calls=[Call("read_file", {"path": "a"}), Call("broken", {"path": "b"})]),
        "a says hello; b could not be read.",
    ]
    result = run_sync("what do a and b say?", model=ScriptedModel(script), tools=[read_file, broken])

    assert result.status == "complete" and not result.requires_human
    assert result.answer == "a says hello; b could not be read."
    assert result.rounds == 2 and result.tool_calls == 2
    assert result.usage.requests == 2 and result.usage.total_tokens > 0
    assert result.requires_human is False
    # Only successful calls count as findings.
    assert result.partial_findings == [
        {"tool": "read_file", "arguments": '{"path": "a"}', "output": "contents of a (20 lines)"}
    ]
    assert result.summary == "Answered after 2 rounds and 2 tool calls."
    assert result.detail == "" and result.summary.startswith("Answered after ")
    assert [item["type"] for item in result.history] == [
        "message", "message", "function_call", "function_call", "function_call_output", "function_call_output",
        "message",
    ]


def test_every_stopped_status_requires_a_human_and_has_a_one_sentence_summary():
    script = [Call("read_file", {"path": "a"}), Turn(error="Error code: 401.\nIncorrect API key provided.")]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])

    assert result.status == "fatal_error" and result.requires_human
    assert result.requires_human is True
    assert result.answer is None
    summary = result.summary
    assert summary.startswith("Stopped with FATAL_ERROR after 2 rounds and 1 tool call: Error code: 401")
    assert "\n" not in summary and summary.endswith("provided.") and ".." not in summary
    assert result.partial_findings[0]["output"] == "contents of a (20 lines)"


def test_answer_is_the_last_text_the_model_gave_when_stopped():
    script = [Turn(text="Found it in a.", calls=[Call("read_file", {"path": "a"})]), Turn(error="gone")]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])
    assert (result.status, result.answer) == ("fatal_error", "Found it in a.")
    assert result.summary == "Stopped with FATAL_ERROR after 2 rounds and 1 tool call: gone."


def test_the_model_sees_the_system_prompt_the_tools_and_the_whole_history():
    requests, seen = [], []

    def script(request):
        requests.append(request)
        seen.append([item["type"] for item in request.history])  # the request holds the live history: snapshot
        return Call("read_file", {"path": "a"}) if len(requests) == 1 else "done"

    run_sync("hi", model=ScriptedModel(script), tools=[read_file])
    first, second = requests
    assert "bounded" in first.system
    assert [t["name"] for t in first.tools] == ["read_file"]
    assert seen == [["message"], ["message", "function_call", "function_call_output"]]
    custom = []
    run_sync("hi", model=ScriptedModel(lambda r: custom.append(r.system) or "ok"), system="Be brief.")
    assert custom == ["Be brief."]


def test_events_tell_a_listener_what_happens():
    from agentkernel.events import MessageDone, RoundStarted, RunFinished, RunStarted, TextDelta, ToolCallFinished

    events = []
    script = [Turn(text="Let me look.", calls=[Call("read_file", {"path": "a"})]), "Done now."]
    result = run_sync("hi", model=ScriptedModel(script), tools=[read_file], on_event=events.append)
    kinds = [type(e) for e in events]
    assert kinds[0] is RunStarted and kinds[-1] is RunFinished and events[-1].result is result
    assert [e.round for e in events if isinstance(e, RoundStarted)] == [1, 2]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me look.Done now."
    assert [e.text for e in events if isinstance(e, MessageDone)] == ["Let me look.", "Done now."]
    assert [e.result.output for e in events if isinstance(e, ToolCallFinished)] == ["contents of a (20 lines)"]


def _scenarios() -> dict[str, dict]:
    """One small run for each status."""
    stopped = StopSignal()
    stopped.set()
    read = [Call("read_file", {"path": f"{i}.ts"}) for i in range(10)]
    same = [Call("read_file", {"path": "a.ts"})] * 10
    return {
        "complete": {"model": ScriptedModel(["hi"])},
        "aborted": {"model": ScriptedModel(["hi"]), "stop": stopped},
        "fatal_error": {"model": ScriptedModel([Turn(error="boom")])},
        "truncated": {"model": ScriptedModel([Turn(text="The answer is", truncated="length")])},
        "repeated_tool_call": {"model": ScriptedModel(same), "guards": GuardConfig(max_stale_turns=0)},
        "no_progress": {"model": ScriptedModel([Turn()] * 5)},
        "tool_failure": {"model": ScriptedModel([Call("broken", {"path": f"{i}"}) for i in range(5)])},
        "hit_iteration_cap": {"model": ScriptedModel(read), "limits": Limits(max_iterations=2)},
        "hit_token_cap": {"model": ScriptedModel(read), "limits": Limits(max_tokens=15)},
        "hit_wall_clock": {"model": ScriptedModel([Turn(text="slow " * 50, delay=0.01)]),
                           "limits": Limits(max_seconds=0.05)},
        "hit_tool_call_cap": {"model": ScriptedModel([read[:3]]), "limits": Limits(max_tool_calls=2)},
        "hit_cost_cap": {"model": ScriptedModel(read), "limits": Limits(max_cost=2.5), "price": Price(10_000, 10_000)},
        "context_overflow": {"model": ScriptedModel(["hi"]), "context_window": 100},  # the system prompt is longer
        "gateway_budget": {"model": SpentKey()},
    }


class SpentKey:
    """A model behind a gateway whose key's budget is spent (the real answer: tests/unit/test_gateway.py)."""

    name = "behind-a-gateway"

    async def stream(self, request):
        raise GatewayBudgetError("the gateway refused the request: the key's budget is spent")
        yield


def test_every_status_is_reachable_and_only_complete_needs_no_human():
    scenarios = _scenarios()
    assert set(scenarios) == set(STATUSES)
    for status, options in scenarios.items():
        result = run_sync("go", tools=[read_file, broken], **options)
        assert result.status == status, result.summary
        assert result.requires_human is (status != "complete")
        summary = result.summary
        assert summary.endswith(".") and "\n" not in summary and ".." not in summary
        if status != "complete":
            assert summary.startswith(f"Stopped with {status.upper()} after ") and result.detail
        validate_history(result.history)


def test_a_truncated_turn_keeps_its_text_and_runs_none_of_its_calls():
    script = [Turn(text="Reading a.", calls=[Call("read_file", {"path": "a"})], truncated="content_filter")]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "truncated" and result.answer == "Reading a." and result.tool_calls == 0
    assert result.detail == ("the server cut the model's response short (content_filter); the text that arrived is "
                             "kept; 1 tool call not run")
    assert outputs(result.history)[0]["output"].startswith("not run: the server cut the model's response short")
    assert result.partial_findings == []
    validate_history(result.history)
