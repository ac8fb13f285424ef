"""One road for a tool call: a tool is handed its call (ToolContext), returns its displays with its output, and the
per-run ToolRunner hands back frozen results that the loop carries on its events (no callbacks wired afterwards)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from runtime_helpers import output_of, run_sync

from agentkernel import Call, Decision, ScriptedModel, tool
from agentkernel.events import ToolCallFinished, ToolCallStarted
from agentkernel.jupyter.panel import Panel
from agentkernel.listeners.timeline import Timeline
from agentkernel.stop import StopSignal
from agentkernel.tools import Display, ToolCall, ToolContext, ToolError, ToolOutput, ToolResult, ToolRunner
from agentkernel.usage import Limits

PNG = {"image/png": "iVBORw0KGgo=", "text/plain": "<a figure>"}


@tool
def whoami(label: str, ctx: ToolContext) -> str:
    """Say which call this is."""
    return f"{label}: {ctx.name} {ctx.call_id} in {ctx.run_id}"


@tool
async def plot(title: str) -> ToolOutput:
    """Draw a figure."""
    return ToolOutput(f"drew {title}", displays=[Display(PNG, {"title": title})])


@tool
def broken_plot() -> str:
    """Draw half a figure, then fail."""
    raise ToolError("the axis is missing", [Display(PNG)])


def test_a_tool_is_handed_its_call_and_the_context_is_not_in_its_schema():
    assert list(whoami.parameters["properties"]) == ["label"] and whoami.parameters["required"] == ["label"]
    assert whoami.context_parameter == "ctx"
    events = []
    model = ScriptedModel([[Call("whoami", {"label": "a"}, call_id="c1"), Call("whoami", {"label": "b"})], "done"])
    result = run_sync("go", model=model, tools=[whoami], on_event=events.append)
    started = [e.call for e in events if isinstance(e, ToolCallStarted)]
    assert [c.call_id for c in started][0] == "c1"
    for call in started:  # each call saw its own final call id and the run's id
        text = output_of(result.history, call.call_id)["output"]
        assert text.endswith(f"whoami {call.call_id} in {result.run_id}")


def test_a_tool_that_asks_for_the_context_by_another_name_gets_it_too():
    @tool
    def named(context: ToolContext) -> str:
        return context.call_id

    assert named.parameters["properties"] == {}
    result = run_sync("go", model=ScriptedModel([[Call("named", {}, call_id="x9")], "ok"]), tools=[named])
    assert output_of(result.history, "x9")["output"] == "x9"


def test_displays_travel_with_the_result_on_the_loop_events_and_never_to_the_model():
    finished: list[ToolResult] = []
    model = ScriptedModel([[Call("plot", {"title": "t"}, call_id="p1"), Call("broken_plot", call_id="p2")], "ok"])
    result = run_sync("go", model=model, tools=[plot, broken_plot],
                      on_event=lambda e: finished.append(e.result) if isinstance(e, ToolCallFinished) else None)
    by_id = {r.call_id: r for r in finished}
    assert by_id["p1"].displays == (Display(PNG, {"title": "t"}),) and by_id["p1"].output == "drew t"
    assert by_id["p2"].status == "error" and by_id["p2"].displays == (Display(PNG),)
    assert by_id["p2"].output == "error: ToolError: the axis is missing"
    assert "iVBOR" not in str(result.history)  # displays are for people: the model reads the text


def test_results_are_frozen_so_what_a_listener_holds_cannot_change():
    result = ToolResult(ToolCall("c", "t", "{}"), "ok", "out")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.output = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.call.call_id = "other"  # type: ignore[misc]


def test_the_panel_and_the_record_show_a_results_displays_from_the_event_alone():
    record = Timeline()
    panel = Panel(Limits(), StopSignal(), record, throttle=0.0)
    call = ToolCall("p1", "plot", '{"title": "t"}')
    done = ToolResult(call, "ok", "drew t", displays=(Display(PNG, {"title": "t"}),), duration=0.5)
    for event in (ToolCallStarted(call), ToolCallFinished(done)):
        panel(event)  # the panel hands each event to its timeline
    (section,) = panel.body.children
    assert section.titles[0] == 'plot(title="t") · ok · 0.50 s'
    (detail,) = section.children  # the section's text, then the display's figure inline (not its other parts)
    figure = f'<img src="data:image/png;base64,{PNG["image/png"]}" alt="&lt;a figure&gt;">'
    assert "drew t" in detail.value and detail.value.endswith(f"{figure}</p></div>")
    (entry,) = record.entries
    assert entry.result is done and entry.images == [Display(PNG, {"title": "t"})]


def test_the_runner_owns_the_approvals_for_the_run():
    asked: list[str] = []

    @tool(read_only=False)
    def write(n: int) -> str:
        return f"wrote {n}"

    def approve(call: ToolCall, _tool: object) -> Decision:
        asked.append(call.call_id)
        return Decision(True, for_run=True)

    runner = ToolRunner({"write": write}, approve)
    try:
        first = asyncio.run(runner.run([ToolCall("a", "write", '{"n": 1}')]))
        second = asyncio.run(runner.run([ToolCall("b", "write", '{"n": 2}')]))
    finally:
        runner.close()
    assert [r.output for r in first + second] == ["wrote 1", "wrote 2"]
    assert asked == ["a"] and runner.approved_for_run == {"write"}


def test_calls_that_never_finished_get_synthetic_results_and_finished_ones_keep_theirs():
    told: list[ToolResult] = []
    runner = ToolRunner({"plot": plot}, on_finish=told.append)
    try:
        (ran,) = asyncio.run(runner.run([ToolCall("p1", "plot", '{"title": "t"}')]))
    finally:
        runner.close()
    never = ToolCall("p2", "plot", '{"title": "u"}')
    kept, made = runner.unfinished([ran.call, never], "not run: stopped", "not_run")
    assert kept is ran
    assert (made.status, made.output, made.synthetic) == ("not_run", "not run: stopped", True)
    assert told == [ran, made]


def test_a_denial_says_why_the_call_was_asked_about_when_the_approver_says_so():
    import asyncio

    from agentkernel.tools import Decision, ToolCall, ToolRunner, tool

    @tool(read_only=False)
    def poke() -> str:
        """Poke."""
        return "poked"

    runner = ToolRunner({"poke": poke}, lambda call, t: Decision(False, asked="may have side effects: untrusted",
                                                         reason="nobody can approve it: CI is set"))
    (result,) = asyncio.run(runner.run([ToolCall("c1", "poke", "{}")]))
    assert result.output == "denied: poke may have side effects: untrusted, and nobody can approve it: CI is set"
