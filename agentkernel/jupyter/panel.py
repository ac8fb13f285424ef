"""The live panel of a ``%%agent`` cell: status, budget bars, Stop, streamed text, one section per tool call.

The panel only listens to loop events; live progress is shown through widget state, never through display
updates or ``clear_output`` (nbval ignores those, so they would make saved notebooks fail to validate).

It costs the same per event however long the run gets. Events only update plain Python entries; the widgets are
brought up to date at most every ``throttle`` seconds, new widgets at most every ``5 * throttle`` (and at once for
an approval or the run's end). Only the
newest messages and calls (at most :data:`LIVE_ENTRIES`) are live widgets; older ones are folded into one static,
still collapsible HTML block that counts them and lists the newest :data:`FOLDED_TITLES` of their titles, and
their widgets are closed. So every update sends a bounded message, and a finished run holds a bounded number of widget
models whatever its length. Calls still running, being written or awaiting approval are never folded.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import ipywidgets as widgets  # type: ignore[import-untyped]
from IPython.display import Markdown
from ipywidgets.widgets.widget_string import HTMLStyle, TextStyle  # type: ignore[import-untyped]

from ..events import (
    ContextCompacted,
    ContextUpdated,
    Event,
    FunctionCallProgress,
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
from ..tools import Decision, Tool, ToolCall, ToolResult
from ..usage import Limits, Usage
from .render import HTML_OUTPUT_CHARS, arguments_html, call_title, change_html, same_call

PANEL_TEXT = "<agentkernel panel: the live view needs a widget front end; the run's transcript follows>"
STATUS_COLOURS = {"ok": "#2e7d32", "error": "#c62828", "denied": "#ef6c00", "aborted": "#6d4c41",
                  "not_run": "#6d4c41"}
LIVE_ENTRIES = 10  # at most this many of the newest messages and calls are live widgets (at least half as many)
FOLDED_TITLES = 50  # how many of the folded entries' titles the fold block lists (the newest)
DROPPED = "not sent: the model stopped before the call was complete"


@dataclass(eq=False)
class Entry:
    """One thing the panel shows, in order: a message, a tool call (maybe still being written) or an approval."""

    kind: Literal["message", "call", "approval", "compaction"]
    call: ToolCall | None = None
    result: ToolResult | None = None
    name: str = ""  # a call being written: its name and the size of its arguments so far
    chars: int = 0
    dropped: bool = False
    text: list[str] = field(default_factory=list)  # a message's pieces, joined when shown
    done: bool = False  # a message is complete / an approval is decided
    pinned: bool = False  # never folded while set (an approval waiting for its click)
    dirty: bool = True  # changed since its widgets were last brought up to date
    count: int = 1  # identical not-run calls shown as one
    view: widgets.Widget | None = None  # what the panel's body shows for it
    parts: list[widgets.Widget] = field(default_factory=list)  # every widget it made (closed when folded)

    @property
    def busy(self) -> bool:
        """Still changing: a call being written or running, a message streaming, an undecided approval."""
        if self.kind == "call":
            return not self.dropped and self.result is None
        if self.kind == "message":
            return not self.done
        return self.pinned

    def title(self) -> str:
        if self.kind == "message":
            return "message: " + " ".join("".join(self.text).split())[:80]
        if self.kind == "approval":
            return f"approval: {self.name}"
        if self.kind == "compaction":
            return self.name
        if self.call is None:
            return f"{self.name}(…) · {'dropped' if self.dropped else 'writing'} · {self.chars} characters"
        duration = f" · {self.result.duration:.2f} s" if self.result else ""
        return call_title(self.call, self.result, self.count) + duration


class Panel:
    """Widgets for one run; call it with each loop event."""

    def __init__(self, limits: Limits, stop: StopSignal, *, throttle: float = 0.1):
        self.limits = limits
        self.stop_signal = stop
        self.throttle = throttle
        self.started = time.monotonic()
        self.round = 0
        self.calls = 0
        self.denied = 0
        self.tokens = 0
        self.usage = Usage()
        self.state = "running"
        self.waiting = False  # for the first token of the round's response
        self.note = ""
        """A line under the status line (where the kernel's transcripts go, said once per kernel)."""
        self.status = widgets.HTML()
        self.bars: dict[str, widgets.FloatProgress] = {}
        for key, label, limit in (("rounds", "rounds", limits.max_iterations),
                                  ("tokens", "tokens", limits.max_tokens),
                                  ("seconds", "seconds", limits.max_seconds),
                                  ("calls", "tool calls", limits.max_tool_calls),
                                  ("cost", "cost (USD)", limits.max_cost)):
            if limit:
                self.bars[key] = widgets.FloatProgress(value=0, min=0, max=float(limit), description=label)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          tooltip="Abort the run: history is kept, _agent holds the result")
        self.stop_button.on_click(lambda _: self.stop_signal.set("stopped with the Stop button"))
        self.body = widgets.VBox()
        self.context: tuple[int, int] | None = None  # the fill and the window, once the window is known
        self.context_bar: widgets.HBox | None = None  # made when the window becomes known
        self.widget = widgets.VBox([widgets.HBox([self.stop_button, self.status]), *self.bars.values(), self.body])
        # One layout and one style for every entry's widgets: otherwise each widget opens two more models.
        self.layout = widgets.Layout()
        self.html_style = HTMLStyle()
        self.button_style: widgets.ButtonStyle | None = None  # made for the first approval, with these two
        self.text_style: TextStyle | None = None
        self.button_layout: widgets.Layout | None = None
        self.live: deque[Entry] = deque()  # shown as widgets, oldest first
        self.by_call: dict[str, Entry] = {}  # live calls by call_id
        self.writing: dict[str, Entry] = {}  # calls the model is still writing, by their progress key
        self.streaming: Entry | None = None  # the message being streamed
        self.folded_kinds = {"call": 0, "message": 0, "approval": 0, "compaction": 0}
        self.folded_titles: deque[str] = deque(maxlen=FOLDED_TITLES)
        self.fold: widgets.HTML | None = None  # the block of folded entries, made at the first fold
        self.fold_changed = False
        self.closing: list[widgets.Widget] = []  # widgets of folded entries, closed at the next flush
        self.last_flush = self.last_reshape = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.flush()

    # -- events ----------------------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta | FunctionCallProgress | MessageDone | ToolCallStarted | RunFinished):
            self.waiting = False
        if isinstance(event, TextDelta):
            if self.streaming is None:
                self.streaming = self.add(Entry("message"))
            self.streaming.text.append(event.text)
            self.streaming.dirty = True
        elif isinstance(event, FunctionCallProgress):
            entry = self.writing.get(event.key)
            if entry is None:
                entry = self.writing[event.key] = self.add(Entry("call", name=event.name))
            entry.chars, entry.dirty = event.arguments_chars, True
        elif isinstance(event, ToolCallStarted):
            self.calls += 1
            self.entry_for(event.call).dirty = True
        elif isinstance(event, ToolCallFinished):
            entry = self.entry_for(event.result.call)
            entry.result, entry.dirty = event.result, True
            self.denied += event.result.status == "denied"
            if event.result.status == "not_run":
                self.merge_not_run(entry)
        elif isinstance(event, MessageDone):
            entry = self.streaming or self.add(Entry("message"))
            entry.text, entry.done, entry.dirty = [event.text], True, True
            self.streaming = None
        elif isinstance(event, RoundStarted):
            self.round, self.waiting = event.round, True
            self.drop_unfinished_writing()
        elif isinstance(event, UsageUpdated):
            self.tokens, self.usage = event.usage.total_tokens, event.usage
        elif isinstance(event, ContextUpdated):
            self.context = (event.fill, event.window) if event.window else None
        elif isinstance(event, ContextCompacted):
            self.add(Entry("compaction", name=event.compaction.title))
        elif isinstance(event, RunFinished):
            result = event.result
            self.state = f"{result.status}: {html.escape(result.detail)}" if result.detail else result.status
            # Disabled and grey: a red button left in the notebook would still look like it could stop something.
            self.stop_button.disabled, self.stop_button.button_style = True, ""
            self.stop_button.tooltip = "The run has ended"
            self.drop_unfinished_writing()
            self.flush(now=True)
            return
        self.schedule()

    def add(self, entry: Entry) -> Entry:
        self.live.append(entry)
        if len(self.live) > LIVE_ENTRIES:
            self.fold_old()
        return entry

    def entry_for(self, call: ToolCall) -> Entry:
        """The live entry of ``call``: its own, the one shown while the model wrote it, or a new one."""
        entry = self.by_call.get(call.call_id)
        if entry is None:
            # The progress key is the call_id or the stream's index for it (and the loop may rename a reused id):
            # take the key if it matches, else the oldest call of that name still being written.
            key = call.call_id if call.call_id in self.writing else next(
                (k for k, e in self.writing.items() if e.name == call.name), None)
            entry = self.writing.pop(key) if key is not None else self.add(Entry("call"))
            entry.call = call
            self.by_call[call.call_id] = entry
        return entry

    def merge_not_run(self, entry: Entry) -> None:
        """A not-run call identical to the live entry before it (a response of 19 ``list_dir(".")``) is counted
        in that entry's section instead of getting one of its own."""
        index = self.live.index(entry) if entry in self.live else 0
        before = self.live[index - 1] if index else None
        if before is None or before.result is None or entry.result is None or entry.call is None \
                or not same_call(before.result, entry.result):
            return
        before.count, before.dirty = before.count + entry.count, True
        del self.live[index]
        self.by_call.pop(entry.call.call_id, None)
        self.closing.extend(entry.parts)

    def drop_unfinished_writing(self) -> None:
        """Calls still being written when a new round starts (or the run ends) were never sent in full."""
        for entry in self.writing.values():
            entry.dropped = entry.dirty = True
        self.writing.clear()

    # -- bringing the widgets up to date -------------------------------------------------------------------------

    def schedule(self) -> None:
        """Flush now if the last flush is ``throttle`` old, else once it will be (one timer at a time)."""
        wait = self.last_flush + self.throttle - time.monotonic()
        if wait <= 0:
            self.flush()
        else:
            self.later(wait)

    def flush(self, *, now: bool = False) -> None:
        """Bring changed entries' widgets up to date, show the fold block, refresh the status line.

        New widgets (and the body's children) change at most every ``5 * throttle`` seconds unless ``now``: what
        costs a front end is making and dropping views, so a fast run redraws its window twice a second while the
        status line and the sections already shown still move every ``throttle``.
        """
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.last_flush = time.monotonic()
        reshape = self.fold_changed or any(e.dirty and self.needs_view(e) for e in self.live)
        if reshape and not now and self.last_flush < self.last_reshape + 5 * self.throttle:
            for entry in self.live:
                if entry.dirty and not self.needs_view(entry):
                    self.show(entry)
            self.refresh()
            self.later(self.last_reshape + 5 * self.throttle - self.last_flush)
            return
        self.last_reshape = self.last_flush
        for entry in self.live:
            if entry.dirty:
                self.show(entry)
        if self.fold_changed:
            if self.fold is None:
                self.fold = widgets.HTML(layout=self.layout, style=self.html_style)
            self.fold.value = self.folded_html()
            self.fold_changed = False
        children = ((self.fold,) if self.fold is not None else ()) + tuple(e.view for e in self.live)
        if children != self.body.children:
            self.body.children = children
        for part in self.closing:  # after the body stopped showing them
            part.close()
        self.closing.clear()
        self.refresh()

    @staticmethod
    def needs_view(entry: Entry) -> bool:
        """Showing the entry takes a new widget: it has none, or its message is done (Markdown replaces text)."""
        return entry.view is None or (entry.kind == "message" and entry.done
                                      and not isinstance(entry.view, widgets.Output))

    def later(self, wait: float) -> None:
        """Flush after ``wait`` seconds (one timer at a time)."""
        if self.timer is None:
            try:
                self.timer = asyncio.get_running_loop().call_later(wait, self.flush)
            except RuntimeError:  # no event loop (a caller feeding events by hand): show it now
                self.flush(now=True)

    def fold_old(self) -> None:
        """Fold the oldest entries that are not busy, down to half the live window.

        Half, not one: a front end re-creates the views after the first child that changed, so folding one entry
        per new one would redraw the whole window each time; this way it redraws it once per half a window.
        """
        excess = len(self.live) - LIVE_ENTRIES // 2
        kept: deque[Entry] = deque()
        for entry in self.live:
            if excess > 0 and not entry.busy:
                self.folded_kinds[entry.kind] += 1
                self.folded_titles.append(entry.title())
                self.closing.extend(entry.parts)
                if entry.call is not None:
                    self.by_call.pop(entry.call.call_id, None)
                excess -= 1
            else:
                kept.append(entry)
        self.live = kept
        self.fold_changed = True

    def folded_html(self) -> str:
        """The fold block: how many entries are folded, expanding to the newest titles."""
        counts = ", ".join(f"{n} {kind}{'s' * (n != 1)}" for kind, n in self.folded_kinds.items() if n)
        folded = sum(self.folded_kinds.values())
        older = folded - len(self.folded_titles)
        lines = "\n".join(f"{older + i + 1}. {html.escape(title)}" for i, title in enumerate(self.folded_titles))
        more = (f"<div><i>… and {older} before these; the whole run is in <code>_agent.history</code> and in "
                "the rendering left when the run ends</i></div>") if older else ""
        return (f"<details><summary><code>{folded} earlier entries folded ({counts})</code></summary>{more}"
                f"<pre style='margin: 0'>{lines}</pre></details>")

    def show(self, entry: Entry) -> None:
        entry.dirty = False
        if entry.kind == "message":
            self.show_message(entry)
        elif entry.kind == "call":
            self.show_call(entry)
        elif entry.kind == "compaction" and entry.view is None:
            entry.view = widgets.HTML(f"<i>⟲ {html.escape(entry.name)}</i>", layout=self.layout,
                                      style=self.html_style)
            entry.parts = [entry.view]

    def show_message(self, entry: Entry) -> None:
        text = "".join(entry.text)
        if entry.done:  # the finished message, rendered as Markdown in place of the streamed text
            self.closing.extend(entry.parts)
            out = widgets.Output(layout=self.layout)
            out.append_display_data(Markdown(text))
            entry.view, entry.parts = out, [out]
        else:
            if entry.view is None:
                entry.view = widgets.HTML(layout=self.layout, style=self.html_style)
                entry.parts = [entry.view]
            entry.view.value = f'<div style="white-space: pre-wrap">{html.escape(text)}</div>'

    def show_call(self, entry: Entry) -> None:
        if entry.view is None:
            detail = widgets.HTML(layout=self.layout, style=self.html_style)
            entry.view = widgets.Accordion(children=[detail], selected_index=None, layout=self.layout)
            entry.parts = [detail, entry.view]
        assert isinstance(entry.view, widgets.Accordion)
        entry.view.set_title(0, entry.title())
        result = entry.result
        if result is not None and result.displays and len(entry.parts) == 2:  # shown below the section's text
            shown = widgets.Output(layout=self.layout)
            shown.outputs = tuple({"output_type": "display_data", "data": d.data, "metadata": d.metadata}
                                  for d in result.displays)
            box = widgets.VBox([entry.parts[0], shown], layout=self.layout)
            entry.view.children = (box,)
            entry.parts += [shown, box]
        call = entry.call
        if call is None:
            what = DROPPED if entry.dropped else f"the model is writing the arguments: {entry.chars} characters so far"
            entry.parts[0].value = f"<i>{html.escape(what)}</i>"
            return
        status = result.status if result else "running"
        output = html.escape(cut(result.output, HTML_OUTPUT_CHARS)) if result else "(running)"
        colour = STATUS_COLOURS.get(status, "#555")
        entry.parts[0].value = (
            f'<b style="color: {colour}">{status}</b>'
            f"<div><i>arguments</i></div>{arguments_html(call.arguments, call.name)}"
            f"<div><i>output</i></div><pre style='margin: 0'>{output}</pre>"
        )

    def refresh(self) -> None:
        elapsed = time.monotonic() - self.started
        denied = f" · {self.denied} call{'s' * (self.denied != 1)} denied" if self.denied else ""
        waiting = " · waiting for the model's first token" if self.waiting else ""
        status = (f"<code>{self.state} · round {self.round} · {self.calls} tool call{'s' * (self.calls != 1)}"
                  f"{denied} · {self.usage.line} · {elapsed:.1f} s{waiting}</code>")
        if self.note:
            status += f"<br><small>{html.escape(self.note)}</small>"
        if status != self.status.value:
            self.status.value = status
        for key, value in (("rounds", self.round), ("tokens", self.tokens), ("seconds", elapsed),
                           ("calls", self.calls), ("cost", self.usage.cost or 0.0)):
            if key in self.bars:
                self.bars[key].value = min(float(value), self.bars[key].max)
        if self.context is not None:
            self.refresh_context(*self.context)

    def refresh_context(self, fill: int, window: int) -> None:
        """The context bar: ``context 2,960 / 4,096`` (added below the budgets once the window is known)."""
        if self.context_bar is None:
            bar = widgets.FloatProgress(value=0, min=0, max=1, description="context")
            self.context_bar = widgets.HBox([bar, widgets.Label()])
            head, *bars, body = self.widget.children
            self.widget.children = (head, *bars, self.context_bar, body)
        bar, label = self.context_bar.children
        bar.max = float(window)
        bar.value = min(float(fill), bar.max)
        text = f"{fill:,} / {window:,}"
        if label.value != text:
            label.value = text

    async def tick(self, every: float = 0.5) -> None:
        """Keep the elapsed time moving (and anything held back shown); cancel when the run ends."""
        while True:
            await asyncio.sleep(every)
            self.flush()

    # -- approval --------------------------------------------------------------------------------------------

    async def approve(self, call: ToolCall, tool: Tool, timeout: float | None,
                      change: tuple[str, str] | None = None) -> Decision:
        """Show the call's arguments with Approve, Approve <tool> for this run, and Deny (with the note typed
        beside it, sent to the model) and wait for a click; denied after ``timeout`` or when the run is stopped.

        ``change`` (old, new): the text the call would replace (edit_cell's), shown as a diff in place of the
        arguments."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[widgets.Button, Decision]] = loop.create_future()

        def decide(button: widgets.Button, decision: Decision) -> None:
            if not answer.done():
                answer.set_result((button, decision))

        if self.button_style is None:
            self.button_style, self.text_style = widgets.ButtonStyle(), TextStyle()
            self.button_layout = widgets.Layout(width="auto")
        note = widgets.Text(placeholder="Deny with a note: what to do instead",
                            layout=self.layout, style=self.text_style)
        shared = {"layout": self.button_layout, "style": self.button_style}
        choices: list[tuple[widgets.Button, Callable[[], Decision]]] = [
            (widgets.Button(description="Approve", button_style="success", **shared), lambda: Decision(True)),
            (widgets.Button(description=f"Approve {call.name} for this run", button_style="info", **shared),
             lambda: Decision(True, for_run=True)),
            (widgets.Button(description="Deny", button_style="warning", **shared),
             lambda: Decision(False, note=note.value)),
        ]
        for button, choice in choices:
            # Click handlers may run on another thread (kernel subshells): hand the decision to our loop.
            button.on_click(lambda b, choice=choice: loop.call_soon_threadsafe(decide, b, choice()))
        (approve, _), (for_run, _), (deny, _) = choices
        question = widgets.HTML(f"<code>{html.escape(call.name)}</code> has side effects. Run it?",
                                layout=self.layout, style=self.html_style)
        shown = change_html(*change) if change is not None else arguments_html(call.arguments, call.name)
        arguments = widgets.HTML(shown, layout=self.layout, style=self.html_style)
        rows = [widgets.HBox([question, approve, for_run], layout=self.layout),
                widgets.HBox([deny, note], layout=self.layout)]
        box = widgets.VBox([arguments, *rows], layout=self.layout)
        entry = self.add(Entry("approval", name=call.name, pinned=True, dirty=False, view=box,
                               parts=[arguments, question, approve, for_run, deny, note, *rows, box]))
        self.flush(now=True)  # a person has to see it now
        chosen, decided = None, "denied: the run was stopped"
        try:
            chosen, decision = await asyncio.wait_for(answer, timeout)
            decided = described(decision)
        except TimeoutError:
            waited = f"no answer within {timeout:g} s (approval_timeout)"
            decision, decided = Decision(False, reason=f"got {waited}"), f"denied: {waited}"
        finally:  # also when Stop cancels the wait: the question is closed at once
            for button, _ in choices:
                button.disabled = True
                if button is not chosen:
                    button.button_style = ""
            note.disabled = True
            entry.pinned = False
            question.value += f" <b>{html.escape(decided)}</b>"
            entry.name = f"{call.name} {decided}"
            self.flush(now=True)
        return decision


def described(decision: Decision) -> str:
    """What the approval row says once decided."""
    if decision.approve:
        return "approved for the rest of this run" if decision.for_run else "approved"
    return "denied with a note" if decision.note.strip() else "denied"
