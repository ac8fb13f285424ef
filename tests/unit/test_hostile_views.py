"""Every view of a run holds hostile text as data: whatever a model writes (its messages, a call's
arguments) and a tool returns (its output, its displays' text), the record's HTML and every HTML widget of the
live panel hold nothing that runs or fetches (checked with a real HTML parser), and the record's plain text no
control character."""

from __future__ import annotations

import asyncio

import ipywidgets as widgets
from hostile_text import HOSTILE, TERMINAL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_html import live_parts

from agentkernel import Call, ScriptedModel, StopSignal, Turn, run, tool
from agentkernel.jupyter.panel import Panel
from agentkernel.jupyter.render import render_html, render_text
from agentkernel.listeners.timeline import Timeline
from agentkernel.tools import Display, ToolOutput
from agentkernel.usage import Limits

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
FRAGMENTS = [HOSTILE, "<img src=x onerror=alert(1)>", "![i](http://evil.example/x.png)", "[a](javascript:alert(1))",
             "<svg><script>alert(1)</script>", '"><script>alert(1)</script>', "</pre></details><script>x</script>",
             "&#10;&lt;script&gt;", "\x1b]8;;http://evil.example\x07link\x1b]8;;\x07", "`<b>`", "\n\n", "*", "|"]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), min_size=1, max_size=5).map("".join)


def hostile_run(message: str, argument: str, output: str) -> tuple[Panel, Timeline, object]:
    @tool
    def lookup(q: str) -> ToolOutput:
        """Look something up."""
        return ToolOutput(output, displays=[Display({"text/html": output, "text/markdown": output,
                                                     "text/plain": output}),
                                            Display({"image/png": PIXEL, "text/plain": output})])

    stop, record = StopSignal(), Timeline()
    panel = Panel(Limits(), stop, throttle=0.0)
    script = [Turn(text=message, calls=[Call("lookup", {"q": argument}), Call(argument[:40] or "x", {})]), message]
    result = asyncio.run(run("go", model=ScriptedModel(script), tools=[lookup], stop=stop,
                             on_event=[panel, record]))
    return panel, record, result


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, texts)
def test_hostile_text_in_any_part_of_a_run_is_data_in_every_view(message: str, argument: str, output: str) -> None:
    panel, record, result = hostile_run(message, argument, output)
    try:
        panel.flush(now=True)
        parts = [part for shown in panel.shown.values() for part in shown.parts] + [panel.fold, panel.status]
        shown = [w.value for w in parts if isinstance(w, widgets.HTML)]
        assert len(shown) >= 3  # the status line and the two calls at least
        for value in shown:
            assert live_parts(value, allow_data_images=True) == [], value
        page = render_html(result, record)  # type: ignore[arg-type]
        assert live_parts(page, allow_data_images=True) == [], page
        text = render_text(result, record)  # type: ignore[arg-type]
        assert not any(c in text for c in TERMINAL), text
    finally:
        panel.close()
