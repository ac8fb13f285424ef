"""The live panel of a ``%%agent`` cell: status, budget bars, Stop, streamed text, one section per tool call.

The panel is the live view of the run's :class:`~agentkernel.listeners.timeline.Timeline` (the static record in
:mod:`.render` is the other): it makes widgets for the timeline's entries and never builds entries of its own. Live
progress is shown through widget state; when the run ends the cell's magic replaces the panel's display with the
record and :meth:`Panel.close` closes every widget the panel made, so the kernel holds no widget of a finished run.

It costs the same per event however long the run gets. Events only update the timeline's plain Python entries; the
widgets are brought up to date at most every ``throttle`` seconds, new widgets at most every ``5 * throttle`` (and
at once for an approval or the run's end). Only the newest messages and calls (at most :data:`LIVE_ENTRIES`) are
live widgets; older ones are folded into one static, still collapsible HTML block that counts them and lists the
newest :data:`FOLDED_TITLES` of their titles, and their widgets are closed. So every update sends a bounded
message. Calls still running, being written or awaiting approval are never folded.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import ipywidgets as widgets  # type: ignore[import-untyped]
from ipywidgets.widgets.widget_string import HTMLStyle, TextStyle  # type: ignore[import-untyped]

from ..events import (
    ContextUpdated,
    Event,
    FunctionCallProgress,
    MessageDone,
    RoundStarted,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdated,
)
from ..listeners.timeline import WAITING, Entry, Timeline
from ..result import briefing_line, loaded_skill, status_line
from ..stop import StopSignal
from ..text import cut
from ..tools import Decision, Tool, ToolCall
from ..usage import Limits, Usage
from .markup import NO_MATH, markdown_html
from .render import HTML_OUTPUT_CHARS, arguments_html, change_html, image_html

if TYPE_CHECKING:
    from .scheduler import RunTurns

STATUS_COLOURS = {"ok": "#2e7d32", "error": "#c62828", "denied": "#ef6c00", "aborted": "#6d4c41",
                  "not_run": "#6d4c41"}
LIVE_ENTRIES = 10  # at most this many of the newest messages and calls are live widgets (at least half as many)
FOLDED_TITLES = 50  # how many of the folded entries' titles the fold block lists (the newest)
DROPPED = "not sent: the model stopped before the call was complete"


@dataclass(eq=False)
class Shown:
    """The widgets showing one entry, and the entry's version they show."""

    view: widgets.Widget | None = None  # what the panel's body shows for it
    parts: list[widgets.Widget] = field(default_factory=list)  # every widget it made (closed when folded)
    version: int = -1


class Panel:
    """Widgets for one run: a live view of its :class:`~agentkernel.listeners.timeline.Timeline`. Call it with each
    loop event (it hands each to the timeline first); :meth:`close` closes every widget it made once the run has
    its record."""

    scope = "run"
    """What the second approval button approves the tool for: "Approve <tool> for this run"."""

    def __init__(self, limits: Limits, stop: StopSignal, timeline: Timeline | None = None, *,
                 throttle: float = 0.1):
        self.limits = limits
        self.stop_signal = stop
        self.timeline = timeline if timeline is not None else Timeline()
        self.timeline.scope, self.timeline.cut_short = self.scope, self.cut_short
        self.timeline.on_add, self.timeline.on_remove = self.add, self.remove
        self.throttle = throttle
        self.started = time.monotonic()
        self.round = 0
        self.calls = 0
        self.compactions = 0
        self.usage = Usage()
        self.state = "running"
        self.waiting = False  # for the first token of the round's response
        self.note = ""
        """A line under the status line (where the kernel's transcripts go, said once per kernel)."""
        self.turns: RunTurns | None = None
        """The run's way to the kernel's turn: the status line says what a queued call waits for."""
        self.briefing: dict[str, list[str]] = {}  # the run's instructions' sources and skills (RunStarted)
        self.loaded_skills: list[str] = []
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
        self.header = widgets.HBox([self.stop_button, self.status])
        self.body = widgets.VBox()
        self.context: tuple[int, int] | None = None  # the fill and the window, once the window is known
        self.context_bar: widgets.HBox | None = None  # made when the window becomes known
        self.widget = widgets.VBox([self.header, *self.bars.values(), self.body])
        # One layout and one style for every entry's widgets: otherwise each widget opens two more models.
        self.layout = widgets.Layout()
        self.html_style = HTMLStyle()
        self.button_style: widgets.ButtonStyle | None = None  # made for the first approval, with these two
        self.text_style: TextStyle | None = None
        self.button_layout: widgets.Layout | None = None
        self.live: deque[Entry] = deque()  # shown as widgets, oldest first
        self.shown: dict[Entry, Shown] = {}  # the widgets of the live entries
        self.folded_kinds = {"call": 0, "message": 0, "approval": 0, "compaction": 0}
        self.folded_titles: deque[str] = deque(maxlen=FOLDED_TITLES)
        self.fold: widgets.HTML | None = None  # the block of folded entries, made at the first fold
        self.fold_changed = False
        self.closing: list[widgets.Widget] = []  # widgets of folded entries, closed at the next flush
        self.last_flush = self.last_reshape = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.flush()

    # -- events ----------------------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        self.timeline(event)
        if isinstance(event, TextDelta | FunctionCallProgress | MessageDone | ToolCallStarted | RunFinished):
            self.waiting = False
        if isinstance(event, ToolCallStarted):
            self.calls += 1
        elif isinstance(event, RoundStarted):
            self.round, self.waiting = event.round, True
        elif isinstance(event, RunStarted):
            self.briefing = event.briefing
        elif isinstance(event, ToolCallFinished) and event.result.status == "ok":
            skill = loaded_skill(event.result.name, event.result.call.arguments)
            self.loaded_skills += [skill] if skill and skill not in self.loaded_skills else []
        elif isinstance(event, UsageUpdated):
            self.usage = event.usage
        elif isinstance(event, ContextUpdated):
            self.context = (event.fill, event.window) if event.window else None
        elif isinstance(event, RunFinished):
            result = event.result
            self.compactions = result.compactions
            self.state = f"{result.status}: {result.detail}" if result.detail else result.status
            # Disabled and grey: a red button would still look like it could stop something.
            self.stop_button.disabled, self.stop_button.button_style = True, ""
            self.stop_button.tooltip = "The run has ended"
            self.flush(now=True)
            return
        self.schedule()

    def add(self, entry: Entry) -> None:
        """A new entry of the timeline: shown live (folding the oldest when the window is full)."""
        self.live.append(entry)
        if len(self.live) > LIVE_ENTRIES:
            self.fold_old()

    def remove(self, entry: Entry) -> None:
        """An entry merged into the one before it (identical not-run calls): its widgets go."""
        if entry in self.live:
            self.live.remove(entry)
        shown = self.shown.pop(entry, None)
        if shown is not None:
            self.closing.extend(shown.parts)

    def add_action(self, widget: widgets.Widget) -> None:
        """Show ``widget`` (a button acting on the run, such as Undo) in the panel's header; it is closed with the
        panel."""
        self.header.children = (*self.header.children, widget)

    # -- bringing the widgets up to date -------------------------------------------------------------------------

    def schedule(self) -> None:
        """Flush now if the last flush is ``throttle`` old, else once it will be (one timer at a time)."""
        wait = self.last_flush + self.throttle - time.monotonic()
        if wait <= 0:
            self.flush()
        else:
            self.later(wait)

    def dirty(self, entry: Entry) -> bool:
        shown = self.shown.get(entry)
        return shown is None or shown.version != entry.version

    def flush(self, *, now: bool = False) -> None:
        """Bring changed entries' widgets up to date, show the fold block, refresh the status line.

        New widgets (and the body's children) change at most every ``5 * throttle`` seconds unless ``now``: what
        costs a front end is making and dropping views, so a fast run redraws its window twice a second while the
        status line and the sections already shown still move every ``throttle``.
        """
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.closed:
            return
        self.last_flush = time.monotonic()
        reshape = self.fold_changed or any(self.dirty(e) and self.needs_view(e) for e in self.live)
        if reshape and not now and self.last_flush < self.last_reshape + 5 * self.throttle:
            for entry in self.live:
                if self.dirty(entry) and not self.needs_view(entry):
                    self.show(entry)
            self.refresh()
            self.later(self.last_reshape + 5 * self.throttle - self.last_flush)
            return
        self.last_reshape = self.last_flush
        for entry in self.live:
            if self.dirty(entry):
                self.show(entry)
        if self.fold_changed:
            if self.fold is None:
                self.fold = widgets.HTML(layout=self.layout, style=self.html_style)
            self.fold.value = self.folded_html()
            self.fold_changed = False
        children = ((self.fold,) if self.fold is not None else ()) + tuple(self.shown[e].view for e in self.live)
        if children != self.body.children:
            self.body.children = children
        for part in self.closing:  # after the body stopped showing them
            part.close()
        self.closing.clear()
        self.refresh()

    def needs_view(self, entry: Entry) -> bool:
        """Showing the entry takes a new widget: it has none yet."""
        shown = self.shown.get(entry)
        return shown is None or shown.view is None

    def later(self, wait: float) -> None:
        """Flush after ``wait`` seconds (one timer at a time)."""
        if self.timer is None and not self.closed:
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
                shown = self.shown.pop(entry, None)
                if shown is not None:
                    self.closing.extend(shown.parts)
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
                "the record left when the run ends</i></div>") if older else ""
        return (f"<details><summary><code>{folded} earlier entries folded ({counts})</code></summary>{more}"
                f"<pre style='margin: 0'>{lines}</pre></details>")

    def show(self, entry: Entry) -> None:
        shown = self.shown.setdefault(entry, Shown())
        shown.version = entry.version
        if entry.kind == "message":
            self.show_message(entry, shown)
        elif entry.kind == "call":
            self.show_call(entry, shown)
        elif entry.kind == "approval":
            self.show_approval(entry, shown)
        elif entry.kind == "compaction" and shown.view is None:
            shown.view = widgets.HTML(f"<i>⟲ {html.escape(entry.name)}</i>", layout=self.layout,
                                      style=self.html_style)
            shown.parts = [shown.view]

    def show_approval(self, entry: Entry, shown: Shown) -> None:
        """An approval as its title, until :meth:`approve` gives it buttons (which then say how it was decided)."""
        if shown.view is None:
            shown.view = widgets.HTML(layout=self.layout, style=self.html_style)
            shown.parts = [shown.view]
        if isinstance(shown.view, widgets.HTML):
            shown.view.value = f"<i>{html.escape(entry.title())}</i>"

    def show_message(self, entry: Entry, shown: Shown) -> None:
        """A message as the model streams it (escaped text), then, once done, rendered from its Markdown in the
        same widget (:func:`markdown_html`: nothing in it runs or is fetched)."""
        if shown.view is None:
            shown.view = widgets.HTML(layout=self.layout, style=self.html_style)
            shown.parts = [shown.view]
        text = entry.message
        shown.view.value = (markdown_html(text) if entry.done
                            else f'<div class="{NO_MATH}" style="white-space: pre-wrap">{html.escape(text)}</div>')

    def show_call(self, entry: Entry, shown: Shown) -> None:
        if shown.view is None:
            detail = widgets.HTML(layout=self.layout, style=self.html_style)
            shown.view = widgets.Accordion(children=[detail], selected_index=None, layout=self.layout)
            shown.parts = [detail, shown.view]
        assert isinstance(shown.view, widgets.Accordion)
        result = entry.result
        shown.view.set_title(0, entry.title() + (f" · {result.duration:.2f} s" if result else ""))
        call = entry.call
        if call is None:
            what = DROPPED if entry.dropped else f"the model is writing the arguments: {entry.chars} characters so far"
            shown.parts[0].value = f"<i>{html.escape(what)}</i>"
            return
        status = result.status if result else "running"
        output = html.escape(cut(result.output, HTML_OUTPUT_CHARS)) if result else "(running)"
        colour = STATUS_COLOURS.get(status, "#555")
        # the call's figures as the record shows them (inline data: URIs of checked base64); a display's other
        # parts (HTML, Markdown) are not shown: its text is in the output
        images = "".join(image_html(d) for d in entry.images)
        shown.parts[0].value = (
            f'<div class="{NO_MATH}"><b style="color: {colour}">{status}</b>'
            f"<div><i>arguments</i></div>{arguments_html(call.arguments, call.name)}"
            f"<div><i>output</i></div><pre style='margin: 0'>{output}</pre>{images}</div>"
        )

    def status_text(self) -> str:
        """The status line: what the run is doing (``waiting for approval (12 s)`` while one waits), then the
        counts as the record's headline gives them."""
        now = time.monotonic()
        since = self.timeline.waiting_since()
        state = f"{WAITING} ({now - since:.0f} s)" if since is not None and self.state == "running" else self.state
        line = status_line(state, self.round, self.calls, self.timeline.denied, self.usage, self.compactions,
                           now - self.started, briefing_line(self.briefing.get("instructions", []),
                                                             self.briefing.get("skills", []), self.loaded_skills))
        line += " · waiting for the model's first token" * self.waiting
        return f"{line} · {self.turns.waiting}" if self.turns is not None and self.turns.waiting else line

    def refresh(self) -> None:
        elapsed = time.monotonic() - self.started
        status = f'<code class="{NO_MATH}">{html.escape(self.status_text(), quote=False)}</code>'
        if self.note:
            status += f"<br><small>{html.escape(self.note)}</small>"
        if status != self.status.value:
            self.status.value = status
        for key, value in (("rounds", self.round), ("tokens", self.usage.total_tokens), ("seconds", elapsed),
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

    def close(self) -> None:
        """Close every widget the panel made (the run has ended and its record replaced the panel): the kernel
        keeps no widget model of a finished run."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.closed = True
        shared = [self.layout, self.html_style, self.button_style, self.text_style, self.button_layout, self.fold]
        parts = [part for shown in self.shown.values() for part in shown.parts]
        for widget in (self.widget, *parts, *self.closing, *shared):
            if widget is not None:
                close_tree(widget)
        self.shown.clear()
        self.closing.clear()
        self.live.clear()

    # -- approval --------------------------------------------------------------------------------------------

    async def approve(self, call: ToolCall, tool: Tool, timeout: float | None,
                      change: tuple[str, str] | None = None) -> Decision:
        """Show the call's arguments with Approve, Approve <tool> for this run (or this :attr:`scope`), and Deny
        (with the note typed beside it, sent to the model) and wait for a click; denied after ``timeout`` or when the
        run is stopped. While it waits the status line says ``waiting for approval`` and for how long.

        ``change`` (old, new): the text the call would replace (edit_cell's), shown as a diff in place of the
        arguments."""
        answer: asyncio.Future[tuple[widgets.Button, Decision]] = asyncio.get_running_loop().create_future()
        note, choices = self.choices(call.name, answer)
        (approve, _), (for_run, _), (deny, _) = choices
        question = widgets.HTML(f"{WAITING}: <code>{html.escape(call.name)}</code> has side effects. Run it?",
                                layout=self.layout, style=self.html_style)
        shown = change_html(*change) if change is not None else arguments_html(call.arguments, call.name)
        arguments = widgets.HTML(f'<div class="{NO_MATH}">{shown}</div>', layout=self.layout, style=self.html_style)
        rows = [widgets.HBox([question, approve, for_run], layout=self.layout),
                widgets.HBox([deny, note], layout=self.layout)]
        box = widgets.VBox([arguments, *rows], layout=self.layout)
        # The runner told the timeline (ApprovalAsked) before asking: the entry is there, and gets the buttons.
        entry = self.timeline.ask(call, time.monotonic())
        if (old := self.shown.get(entry)) is not None:
            self.closing.extend(old.parts)
        self.shown[entry] = Shown(box, [arguments, question, approve, for_run, deny, note, *rows, box], entry.version)
        self.flush(now=True)  # a person has to see it now
        chosen, decided = None, ""
        try:
            chosen, decision = await asyncio.wait_for(answer, timeout)
            decided = described(decision, self.scope)
        except TimeoutError:
            waited = f"no answer within {timeout:g} s (approval_timeout)"
            decision, decided = Decision(False, reason=f"got {waited}", by="policy"), f"denied: {waited}"
        finally:  # also when Stop cancels the wait: the question is closed at once (the runner tells the timeline)
            decided = decided or self.cut_short()
            for button, _ in choices:
                button.disabled = True
                if button is not chosen:
                    button.button_style = ""
            note.disabled = True
            question.value = (f"<code>{html.escape(call.name)}</code> has side effects. Run it? "
                              f"<b>{html.escape(decided)}</b>")
            self.flush(now=True)
        return decision

    def choices(self, name: str, answer: asyncio.Future[tuple[widgets.Button, Decision]]
                ) -> tuple[widgets.Text, list[tuple[widgets.Button, Callable[[], Decision]]]]:
        """An approval's note field and its buttons (Approve, Approve ``name`` for this :attr:`scope`, Deny with the
        note), each click setting ``answer`` once, on the run's event loop."""
        loop = asyncio.get_running_loop()

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
            (widgets.Button(description=f"Approve {name} for this {self.scope}", button_style="info", **shared),
             lambda: Decision(True, for_run=True)),
            (widgets.Button(description="Deny", button_style="warning", **shared),
             lambda: Decision(False, note=note.value)),
        ]
        for button, choice in choices:
            # Click handlers may run on another thread (kernel subshells): hand the decision to our loop.
            button.on_click(lambda b, choice=choice: loop.call_soon_threadsafe(decide, b, choice()))
        return note, choices

    def cut_short(self) -> str:
        """What an approval row says when its wait was cancelled (Stop)."""
        return f"denied: the {self.scope} was stopped"


def close_tree(widget: widgets.Widget) -> None:
    """Close ``widget`` and every widget it holds (children, layout, style), depth first."""
    if getattr(widget, "comm", None) is None:  # closed already (and so were the widgets it held when it was)
        return
    for name in widget.keys:
        value = getattr(widget, name, None)
        for held in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(held, widgets.Widget):
                close_tree(held)
    widget.close()


def described(decision: Decision, scope: str) -> str:
    """What the approval row says once decided (``scope``: :attr:`Panel.scope`)."""
    if decision.approve:
        return f"approved for the rest of this {scope}" if decision.for_run else "approved"
    return "denied with a note" if decision.note.strip() else "denied"
