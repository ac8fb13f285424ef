"""The live panel fed with a real loop's events (real ipywidgets, no front end): bounded however long the run.

The kernel tests (``test_panel_kernel.py``) check the same through a real kernel's messages; these check the panel's
own bookkeeping quickly and exactly.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import ipywidgets as widgets
import pytest
from ipywidgets.widgets.widget import _instances as alive_widgets

from agentkernel import Call, ScriptedModel, StopSignal, run, tool
from agentkernel.events import FunctionCallProgress, RoundStarted, ToolCallStarted
from agentkernel.jupyter.panel import FOLDED_TITLES, LIVE_ENTRIES, Panel
from agentkernel.jupyter.render import arguments_html, change_html, render_text
from agentkernel.tools import ToolCall
from agentkernel.usage import Limits


@tool
async def noop(i: int) -> str:
    """Do nothing."""
    return "ok"


def run_with_panel(script: list, *, throttle: float = 0.1, **options) -> tuple[Panel, object]:
    stop = StopSignal()
    panel = Panel(Limits(), stop, throttle=throttle)
    result = asyncio.run(run("go", model=ScriptedModel(script), tools=[noop], stop=stop, on_event=panel,
                             **options))
    return panel, result


def accordion_titles(panel: Panel) -> list[str]:
    return [w.titles[0] for w in panel.body.children if isinstance(w, widgets.Accordion)]


@pytest.mark.parametrize("throttle", [0.0, 0.1], ids=["every event", "throttled"])
def test_a_long_run_keeps_a_bounded_panel_and_folds_the_rest(throttle: float):
    before = len(alive_widgets)
    n = 1000
    panel, result = run_with_panel([Call("noop", {"i": i}) for i in range(n)] + ["All done."], throttle=throttle)
    assert result.status == "complete" and result.tool_calls == n

    fold, *live = panel.body.children
    assert LIVE_ENTRIES // 2 <= len(live) <= LIVE_ENTRIES
    titles = accordion_titles(panel)
    # The newest calls stay live, in order, finished; the final message is the last entry.
    assert titles == [t for t in titles if " · ok · " in t] and len(titles) == len(live) - 1
    assert titles[-1].startswith(f"noop(i={n - 1}) · ok · ")
    assert titles[0].startswith(f"noop(i={n - len(titles)}) · ok")
    assert isinstance(live[-1], widgets.HTML) and "<p>All done.</p>" in live[-1].value  # rendered, in place
    # Every older call is counted in the fold block, which lists only the newest FOLDED_TITLES of them.
    folded = n - len(titles)
    assert f"{folded} earlier entries folded ({folded} calls)" in fold.value
    listed = re.findall(r"(?:^|>)(\d+)\. noop", fold.value, re.MULTILINE)
    assert [int(i) for i in listed] == list(range(folded - FOLDED_TITLES + 1, folded + 1))
    assert f"noop(i={folded - 1}) · ok" in fold.value and "noop(i=0)" not in fold.value
    assert f"… and {folded - FOLDED_TITLES} before these" in fold.value
    assert len(fold.value) < 6000  # bounded, whatever the run's length
    # Folded calls' widgets were closed: what is left is the panel itself and the live window.
    assert len(alive_widgets) - before <= 50
    assert "complete · 1001 rounds · 1000 tool calls" in panel.status.value


def test_every_update_is_bounded_however_long_the_run(monkeypatch: pytest.MonkeyPatch):
    sizes: list[int] = []
    send = widgets.Widget._send

    def recording_send(self, msg, buffers=None):
        sizes.append(len(json.dumps(msg, default=str)))
        return send(self, msg, buffers)

    monkeypatch.setattr(widgets.Widget, "_send", recording_send)
    run_with_panel([Call("noop", {"i": i}) for i in range(50)] + ["done"], throttle=0.0)
    short_run = max(sizes)
    sizes.clear()
    run_with_panel([Call("noop", {"i": i}) for i in range(500)] + ["done"], throttle=0.0)
    assert max(sizes) < 8000 and max(sizes) <= 1.2 * max(short_run, 6000), (short_run, max(sizes))


def test_a_call_shows_while_the_model_writes_it_and_becomes_its_section():
    stop = StopSignal()
    panel = Panel(Limits(), stop, throttle=0.0)
    panel(RoundStarted(1))
    panel(FunctionCallProgress("k1", "noop", 0))
    (section,) = panel.body.children
    assert section.titles[0] == "noop(…) · writing · 0 characters"
    panel(FunctionCallProgress("k1", "noop", 9))
    assert section.titles[0] == "noop(…) · writing · 9 characters"
    assert "9 characters so far" in section.children[0].value
    # The loop may rename the call (a reused id): matched by name, it takes over the same section.
    panel(ToolCallStarted(ToolCall("k1_3", "noop", '{"i": 1}')))
    assert panel.body.children == (section,)
    assert section.titles[0] == "noop(i=1) · running"


def test_a_call_the_model_never_finished_writing_is_marked_dropped():
    panel = Panel(Limits(), StopSignal(), throttle=0.0)
    panel(RoundStarted(1))
    panel(FunctionCallProgress("k1", "noop", 5))
    panel(RoundStarted(2))
    (section,) = panel.body.children
    assert section.titles[0] == "noop(…) · dropped · 5 characters"
    assert "not sent" in section.children[0].value


def test_stop_ends_a_long_run_at_once():
    stop = StopSignal()
    panel = Panel(Limits(), stop)

    @tool
    async def slowish(i: int) -> str:
        """Take a moment."""
        await asyncio.sleep(0.001)
        return "ok"

    endless = ScriptedModel(lambda request: Call("slowish", {"i": len(request.history)}))

    async def main():
        asyncio.get_running_loop().call_later(0.5, stop.set, "stopped with the Stop button")
        start = time.monotonic()
        result = await run("go", model=endless, tools=[slowish], stop=stop, on_event=panel)
        return result, time.monotonic() - start

    result, elapsed = asyncio.run(main())
    assert result.status == "aborted" and result.tool_calls > 10 and elapsed < 0.5 + 0.2
    assert "aborted: stopped with the Stop button" in panel.status.value
    assert panel.stop_button.disabled


def test_the_static_rendering_of_a_long_run_is_bounded_and_deterministic():
    from agentkernel.jupyter.render import render_html, render_text
    from agentkernel.listeners.timeline import HEAD_ENTRIES, TAIL_ENTRIES, Timeline

    def rendered(n: int) -> tuple[str, str]:
        record = Timeline()
        result = asyncio.run(run("go", model=ScriptedModel([Call("noop", {"i": i}) for i in range(n)] + ["Done."]),
                                 tools=[noop], on_event=record))
        return render_text(result, record), render_html(result, record)

    text, page = rendered(1000)
    lines = text.splitlines()
    calls = [line for line in lines if line.startswith("▸ ")]
    assert len(calls) == HEAD_ENTRIES + TAIL_ENTRIES - 1  # the last entry is the final message
    assert calls[0] == "▸ noop(i=0) · ok" and calls[HEAD_ENTRIES - 1] == f"▸ noop(i={HEAD_ENTRIES - 1}) · ok"
    omitted = 1001 - HEAD_ENTRIES - TAIL_ENTRIES
    assert lines.index(f"… {omitted} more entries (tool calls and messages) are left out here; the whole run is in "
                       "_agent.history") == 1 + 2 * HEAD_ENTRIES
    assert calls[-1] == "▸ noop(i=999) · ok" and lines[-1] == "Done."
    assert page.count("<details>") == len(calls) and f"… {omitted} more entries" in page
    assert rendered(1000) == (text, page)  # no timings or ids: the same run renders the same
    short_text, _ = rendered(3)
    assert "left out" not in short_text and short_text.count("▸ ") == 3


def test_approvals_stay_until_answered_then_fold_and_close_their_widgets():
    @tool(read_only=False)
    async def write(i: int) -> str:
        """Write something (a side effect)."""
        return "written"

    panel = Panel(Limits(), StopSignal(), throttle=0.0)
    asked = []

    async def click_approve(call, t):
        answer = asyncio.ensure_future(panel.approve(call, t, None))
        await asyncio.sleep(0)  # the row is shown
        # The call's arguments above two rows: question, Approve, Approve for the run; Deny and its note. Never
        # folded while it waits.
        shown = panel.shown[panel.live[-1]].view
        assert shown in panel.body.children and panel.live[-1].busy
        arguments, (note, approve, _) = shown.children[0], shown.children[1].children
        asked.append(arguments.value + note.value)
        approve.click()
        return await answer

    before = len(alive_widgets)
    script = [Call("write", {"i": i}) for i in range(40)] + ["done"]
    result = asyncio.run(run("go", model=ScriptedModel(script), tools=[write], approve=click_approve,
                             on_event=panel))
    assert result.status == "complete" and [f["output"] for f in result.partial_findings] == ["written"] * 40
    assert len(asked) == 40 and '&quot;i&quot;: 0' in asked[0] and "has side effects. Run it?" in asked[0]
    fold = panel.body.children[0].value
    counted = re.search(r"(\d+) earlier entries folded \((\d+) calls, (\d+) approvals\)", fold)
    assert counted and int(counted.group(1)) == int(counted.group(2)) + int(counted.group(3)), fold
    assert "approval: write · approved" in fold
    assert len(alive_widgets) - before <= 50
    lines = render_text(result, panel.timeline).splitlines()  # the record says approval in words, not a bare "?"
    assert "approval: write · approved" in lines and not [line for line in lines if line.startswith("?")]


def test_deeply_nested_arguments_do_not_break_the_panel():
    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    panel, result = run_with_panel([Call("noop", deep), "done"], throttle=0.0)
    assert result.status == "complete"
    (title,) = accordion_titles(panel)
    assert title.startswith('noop({"a": {"a":') and " · error · " in title


@tool
def read_chunk(n: int) -> str:
    """Read chunk n: about 1.5 KB."""
    return "\n".join(f"chunk {n}, line {i}: the quick brown fox jumps over the lazy dog" for i in range(24))


def test_a_compacting_run_shows_its_context_bar_and_one_entry_per_compaction():
    stop = StopSignal()
    panel = Panel(Limits(max_iterations=500), stop, throttle=0.0)
    script = [Call("read_chunk", {"n": i}) for i in range(30)] + ["Read them."]
    result = asyncio.run(run("go", model=ScriptedModel(script), tools=[read_chunk], stop=stop, on_event=panel,
                             context_window=4096))
    assert result.status == "complete" and result.compactions >= 2

    head, rounds, box, body = panel.widget.children  # below the budgets' bars, above the entries
    assert box is panel.context_bar and body is panel.body and rounds.description == "rounds"
    bar, label = box.children
    assert isinstance(bar, widgets.FloatProgress) and bar.description == "context" and bar.max == 4096.0
    assert panel.context is not None
    fill, window = panel.context
    assert window == 4096 and label.value == f"{fill:,} / 4,096" and bar.value == min(fill, 4096)
    # One entry per compaction, live or folded, titled as the static rendering titles it.
    live = [w.value for w in panel.body.children
            if isinstance(w, widgets.HTML) and w.value.startswith("<i>⟲ context compacted (high water): ")]
    assert len(live) + panel.folded_kinds["compaction"] == result.compactions
    assert sum("context compacted (high water): " in t for t in panel.folded_titles) == panel.folded_kinds[
        "compaction"]


def test_no_context_bar_while_the_window_is_unknown():
    panel, result = run_with_panel([Call("noop", {"i": i}) for i in range(3)] + ["done"], throttle=0.0)
    assert result.status == "complete"
    assert panel.context is None and panel.context_bar is None and len(panel.widget.children) == 2


def test_a_cell_to_add_shows_highlighted_as_its_type_and_an_edit_as_a_diff():
    markdown = arguments_html(json.dumps({"source": "## Findings\nPune is *wettest*.", "cell_type": "markdown"}),
                              "add_cell")
    assert markdown.startswith("<div><i>markdown cell · 2 lines</i></div>") and "<span" in markdown
    code = arguments_html(json.dumps({"source": "total = 1", "after": "abc"}), "add_cell")
    assert code.startswith("<div><i>code cell · 1 line</i></div>") and "&quot;after&quot;: &quot;abc&quot;" in code
    assert arguments_html(json.dumps({"source": "x"}), "my_tool").startswith("<pre")  # another tool's source: JSON
    diff = re.sub(r"<[^>]+>", "", change_html("rain = 1\nkeep", "rain = 2\nkeep"))
    assert diff.startswith("the change · before → after") and "-rain = 1\n+rain = 2\n keep" in diff


def test_the_status_line_says_the_panel_waits_for_the_models_first_token():
    from agentkernel.models.base import TextDelta

    panel = Panel(Limits(), StopSignal())
    panel(RoundStarted(1))
    panel.refresh()
    assert "waiting for the model's first token" in panel.status.value
    panel(TextDelta("Hi"))
    panel.refresh()
    assert "waiting" not in panel.status.value
