"""The live panel of a ``%%agent`` cell: status, budget bars, Stop, streamed text, one section per tool call.

The panel only listens to loop events; live progress is shown through widget state, never through display
updates or ``clear_output`` (nbval ignores those, so they would make saved notebooks fail to validate).
"""

from __future__ import annotations

import asyncio
import html
import time

import ipywidgets as widgets
from IPython.display import Markdown

from ..events import (
    Event,
    MessageDone,
    RoundStarted,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdated,
)
from ..stop import StopSignal
from ..text import cut
from ..tools import Tool, ToolCall
from ..usage import Limits
from .code_runner import Output
from .render import HTML_OUTPUT_CHARS, arguments_html, call_title

PANEL_TEXT = "<agentkernel panel: the live view needs a widget front end; the run's transcript follows>"
STATUS_COLOURS = {"ok": "#2e7d32", "error": "#c62828", "denied": "#ef6c00", "aborted": "#6d4c41",
                  "not_run": "#6d4c41"}


class Panel:
    """Widgets for one run; call it with each loop event."""

    def __init__(self, limits: Limits, stop: StopSignal, *, throttle: float = 0.1):
        self.limits = limits
        self.stop_signal = stop
        self.throttle = throttle
        self.started = time.monotonic()
        self.round = 0
        self.calls = 0
        self.tokens = 0
        self.state = "running"
        self.status = widgets.HTML()
        self.bars: dict[str, widgets.FloatProgress] = {}
        for key, label, limit in (("rounds", "rounds", limits.max_iterations),
                                  ("tokens", "tokens", limits.max_tokens),
                                  ("seconds", "seconds", limits.max_seconds),
                                  ("calls", "tool calls", limits.max_tool_calls)):
            if limit:
                self.bars[key] = widgets.FloatProgress(value=0, min=0, max=float(limit), description=label)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          tooltip="Abort the run: history is kept, _agent holds the result")
        self.stop_button.on_click(lambda _: self.stop_signal.set("stopped with the Stop button"))
        self.body = widgets.VBox()
        self.widget = widgets.VBox([widgets.HBox([self.stop_button, self.status]), *self.bars.values(), self.body])
        self.sections: dict[str, widgets.Accordion] = {}
        self.streaming: widgets.HTML | None = None
        self.text: list[str] = []  # the streaming message's pieces, joined when shown
        self.unshown = False  # pieces arrived since the last flush
        self.last_flush = 0.0
        self.refresh()

    # -- events ----------------------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        if isinstance(event, RoundStarted):
            self.round = event.round
        elif isinstance(event, TextDelta):
            self.text.append(event.text)
            self.unshown = True
            if time.monotonic() - self.last_flush >= self.throttle:
                self.flush_text()
            return  # no status refresh per piece of text: the ticker moves it, and the front end is not flooded
        elif isinstance(event, MessageDone):
            self.finish_text(event.text)
        elif isinstance(event, UsageUpdated):
            self.tokens = event.usage.total_tokens
        elif isinstance(event, ToolCallStarted):
            self.calls += 1
            self.show_call(event.call)
        elif isinstance(event, ToolCallFinished):
            self.show_call(event.call)
        elif isinstance(event, RunFinished):
            result = event.result
            self.state = f"{result.status}: {html.escape(result.detail)}" if result.detail else result.status
            self.stop_button.disabled = True
        self.refresh()

    def flush_text(self) -> None:
        if self.streaming is None:
            self.streaming = widgets.HTML()
            self.add(self.streaming)
        self.streaming.value = f'<div style="white-space: pre-wrap">{html.escape("".join(self.text))}</div>'
        self.last_flush, self.unshown = time.monotonic(), False

    def finish_text(self, text: str) -> None:
        """Replace the streamed text by the message rendered as Markdown."""
        out = widgets.Output()
        out.append_display_data(Markdown(text))
        if self.streaming is not None:
            self.body.children = tuple(out if w is self.streaming else w for w in self.body.children)
        else:
            self.add(out)
        self.streaming, self.text, self.unshown = None, [], False

    def show_call(self, call: ToolCall) -> None:
        section = self.sections.get(call.call_id)
        if section is None:
            section = widgets.Accordion(children=[widgets.HTML()], selected_index=None)
            self.sections[call.call_id] = section
            self.add(section)
        duration = f" · {call.duration:.2f} s" if call.status else ""
        section.set_title(0, call_title(call) + duration)
        output = html.escape(cut(call.output, HTML_OUTPUT_CHARS)) if call.status else "(running)"
        colour = STATUS_COLOURS.get(call.status or "", "#555")
        detail = section.children[0]
        if isinstance(detail, widgets.VBox):  # the call showed rich outputs below its text
            detail = detail.children[0]
        detail.value = (
            f'<b style="color: {colour}">{call.status or "running"}</b>'
            f"<div><i>arguments</i></div>{arguments_html(call.arguments)}"
            f"<div><i>output</i></div><pre style='margin: 0'>{output}</pre>"
        )

    def show_displays(self, call_id: str, outputs: list[Output]) -> None:
        """Show a call's rich outputs (images, HTML) in its section, below its text."""
        section = self.sections.get(call_id)
        if section is None:
            return
        view = widgets.Output()
        view.outputs = tuple({"output_type": "display_data", "data": o.data, "metadata": o.metadata}
                             for o in outputs)
        section.children = (widgets.VBox([*section.children, view]),)

    def add(self, widget: widgets.Widget) -> None:
        self.body.children = (*self.body.children, widget)

    def refresh(self) -> None:
        elapsed = time.monotonic() - self.started
        self.status.value = (f"<code>{self.state} · round {self.round} · "
                             f"{self.calls} tool call{'s' * (self.calls != 1)} · "
                             f"{self.tokens} tokens · {elapsed:.1f} s</code>")
        for key, value in (("rounds", self.round), ("tokens", self.tokens), ("seconds", elapsed),
                           ("calls", self.calls)):
            if key in self.bars:
                self.bars[key].value = min(float(value), self.bars[key].max)

    async def tick(self, every: float = 0.5) -> None:
        """Keep the elapsed time moving, and show text held back by the throttle; cancel when the run ends."""
        while True:
            await asyncio.sleep(every)
            if self.unshown:
                self.flush_text()
            self.refresh()

    # -- approval --------------------------------------------------------------------------------------------

    async def approve(self, call: ToolCall, tool: Tool, timeout: float | None) -> bool:
        """Show Approve / Deny for a side-effecting call and wait for a click (denied after ``timeout``)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()

        def decide(verdict: bool) -> None:
            if not answer.done():
                answer.set_result(verdict)

        approve = widgets.Button(description="Approve", button_style="success")
        deny = widgets.Button(description="Deny", button_style="warning")
        # Click handlers may run on another thread (kernel subshells): hand the verdict to our loop.
        approve.on_click(lambda _: loop.call_soon_threadsafe(decide, True))
        deny.on_click(lambda _: loop.call_soon_threadsafe(decide, False))
        note = widgets.HTML(f"<code>{html.escape(call.name)}</code> has side effects. Run it?")
        self.add(widgets.VBox([widgets.HTML(arguments_html(call.arguments)), widgets.HBox([note, approve, deny])]))
        try:
            verdict = await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            verdict = False
        finally:
            approve.disabled = deny.disabled = True
        note.value += f" <b>{'approved' if verdict else 'denied'}</b>"
        return verdict
