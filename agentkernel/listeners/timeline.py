"""A run's timeline: the loop's events turned into the entries a person reads, in order.

One :class:`Timeline` per run listens to the loop's events and keeps its entries: the assistant's messages, the
tool calls (one entry per call id, from the moment the model names the call until its result), the approvals
asked, and the compactions of the model's view. The live panel and the static record left in the notebook are two
views of the same entries (:mod:`agentkernel.jupyter.panel`, :mod:`agentkernel.jupyter.render`); neither builds
entries of its own.

Identical calls that were never run (a cut response of 19 ``list_dir(".")``) are one entry with a count. A long
run keeps its first :data:`HEAD_ENTRIES` and last :data:`TAIL_ENTRIES` entries and counts the ones between, so
what a view holds stays bounded whatever the run's length; the whole run is in the result's history.

This module is pure: it never imports IPython or ipywidgets, and it never reads a clock (an approval's start time
comes with its event). Approvals are the runner's events (:class:`ApprovalAsked`, :class:`ApprovalDecided`), so a
terminal or headless run's record shows them as a panel's does; a view only draws the buttons.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from ..events import (
    ApprovalAsked,
    ApprovalDecided,
    ContextCompacted,
    Event,
    FunctionCallProgress,
    MessageDone,
    RoundStarted,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ..journal import CHANGES_MIME
from ..record.images import IMAGE_TYPES
from ..secrets import redact_text
from ..text import reveal, short, short_arguments
from ..tools.base import Display, ToolCall, ToolResult

HEAD_ENTRIES = 50
"""A long run's views keep its first this many entries..."""
TAIL_ENTRIES = 150
"""...and its last this many, and count the ones between."""
WAITING = "waiting for approval"
"""What the panel and the terminal say while an approval waits for its answer."""

EntryKind = Literal["message", "call", "approval", "compaction"]


@dataclass(eq=False)
class Entry:
    """One thing a run shows, in order: a message, a tool call (maybe still being written), an approval or a
    compaction. Views compare :attr:`version` with the one they last showed to know what changed."""

    kind: EntryKind
    call: ToolCall | None = None
    """A call's request, once the model finished writing it."""
    result: ToolResult | None = None
    name: str = ""
    """A call being written: its name; an approval: the tool asked about; a compaction: its title."""
    chars: int = 0
    """A call being written: the characters of its arguments so far."""
    dropped: bool = False
    """A call the model stopped writing before it was complete (never sent)."""
    text: list[str] = field(default_factory=list)
    """A message's pieces, joined when shown (:attr:`message`)."""
    done: bool = False
    """A message is complete, an approval decided."""
    asked_at: float | None = None
    """An approval still waiting: when it was asked (the caller's clock)."""
    decided: str = ""
    """An approval's answer: ``approved``, ``denied with a note``, ..."""
    count: int = 1
    """How many identical not-run calls the entry stands for."""
    version: int = 0
    """Bumped by every change."""

    @property
    def message(self) -> str:
        return "".join(self.text)

    @property
    def busy(self) -> bool:
        """Still changing: a call being written or running, a message streaming, an approval waiting."""
        if self.kind == "call":
            return not self.dropped and self.result is None
        return not self.done if self.kind in ("message", "approval") else False

    @property
    def images(self) -> list[Display]:
        """The call's displays that hold an image (a figure run_python drew, an MCP tool's image)."""
        displays = self.result.displays if self.result else ()
        return [d for d in displays if any(k in IMAGE_TYPES for k in d.data)]

    @property
    def changes(self) -> str:
        """The variables a ``run_python`` call changed, as its result's display names them: ``df (in place), tmp
        (new)`` (empty for another call, or one that changed none)."""
        for display in self.result.displays if self.result else ():
            if CHANGES_MIME in display.data:
                return str(display.data.get("text/plain", "")).removeprefix("variables: ")
        return ""

    def title(self) -> str:
        """The entry in one line: ``list_dir(path=".") · ok``, ``message: …``, ``approval: run_python · approved``."""
        if self.kind == "message":
            return "message: " + " ".join(self.message.split())[:80]
        if self.kind == "approval":
            return f"approval: {self.name} · {self.decided or WAITING}"
        if self.kind == "compaction":
            return self.name
        if self.call is None:
            return f"{self.name}(…) · {'dropped' if self.dropped else 'writing'} · {self.chars} characters"
        changes = self.changes
        return call_title(self.call, self.result, self.count) + (f" · {short(changes, 120)}" if changes else "")


def call_title(call: ToolCall, result: ToolResult | None = None, count: int = 1) -> str:
    """``list_dir(path=".") · not_run``, with `` × 19`` for an entry standing for identical calls."""
    name, shown = reveal(call.name)[0], reveal(short_arguments(redact_text(call.arguments)))[0]
    return f"{name}({shown}) · {result.status if result else 'running'}" + (f" × {count}" if count > 1 else "")


def same_call(a: ToolResult, b: ToolResult) -> bool:
    """Whether two finished calls show the same section (name, arguments, status and output)."""
    return (a.name, a.arguments, a.status, a.output) == (b.name, b.arguments, b.status, b.output)


@dataclass
class Timeline:
    """The entries of one run, built from its events (call it with each one).

    ``on_add`` and ``on_remove`` tell a live view that an entry appeared or was merged into the one before it.
    """

    on_add: Callable[[Entry], None] | None = None
    on_remove: Callable[[Entry], None] | None = None
    head: list[Entry] = field(default_factory=list)
    tail: deque[Entry] = field(default_factory=deque)
    omitted: int = 0
    """Entries left out between the head and the tail."""
    denied: int = 0
    """Calls denied so far."""
    calls: dict[str, Entry] = field(default_factory=dict)  # the calls kept, by call_id
    writing: dict[str, Entry] = field(default_factory=dict)  # calls being written, by their progress key
    streaming: Entry | None = None  # the message being streamed
    waiting: dict[str, Entry] = field(default_factory=dict)  # approvals waiting for their answer, by call_id
    scope: str = "run"
    """What an approval for the rest of it approves the tool for: a ``run``, or a served ``session``."""
    cut_short: Callable[[], str] | None = None
    """What an approval cut short by a cancellation says (a view that knows who cancelled: Stop or the client)."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            if self.streaming is None:
                self.streaming = self.add(Entry("message"))
            self.changed(self.streaming).text.append(event.text)
        elif isinstance(event, MessageDone):
            entry = self.changed(self.streaming or self.add(Entry("message")))
            entry.text, entry.done = [event.text], True
            self.streaming = None
        elif isinstance(event, FunctionCallProgress):
            writing = self.writing.get(event.key)
            if writing is None:
                writing = self.writing[event.key] = self.add(Entry("call", name=event.name))
            self.changed(writing).chars = event.arguments_chars
        elif isinstance(event, ToolCallStarted):
            self.changed(self.entry_for(event.call))
        elif isinstance(event, ToolCallFinished):
            self.finished(event.result)
        elif isinstance(event, ApprovalAsked):
            self.ask(event.call, event.at)
        elif isinstance(event, ApprovalDecided):
            if (asked := self.waiting.get(event.call.call_id)) is not None:  # unasked ones (a rule's) show no entry
                self.decide(asked, self.described(event))
        elif isinstance(event, ContextCompacted):
            self.add(Entry("compaction", name=event.compaction.title))
        elif isinstance(event, (RoundStarted, RunFinished)):
            self.drop_unfinished_writing()

    # -- approvals ---------------------------------------------------------------------------------------------

    def ask(self, call: ToolCall, at: float) -> Entry:
        """An approval of ``call`` asked at ``at``: an entry, waiting until :meth:`decide` (the one asked for that
        call id already, if any)."""
        entry = self.waiting.get(call.call_id)
        if entry is None:
            entry = self.waiting[call.call_id] = self.add(Entry("approval", name=call.name, asked_at=at))
        return entry

    def decide(self, entry: Entry, decided: str) -> None:
        self.changed(entry)
        entry.done, entry.asked_at, entry.decided = True, None, decided
        for call_id, waiting in list(self.waiting.items()):
            if waiting is entry:
                del self.waiting[call_id]

    def described(self, event: ApprovalDecided) -> str:
        """What an approval's entry says once decided: ``approved``, ``approved: --allow-writes``, ``denied with a
        note``, ``denied: <reason>``."""
        if event.approved:
            if event.reason:
                return f"approved: {event.reason}"
            return f"approved for the rest of this {self.scope}" if event.for_run else "approved"
        if event.stopped:
            return self.cut_short() if self.cut_short is not None else f"denied: the {self.scope} was stopped"
        if event.reason:
            return f"denied: {event.reason}"
        return "denied with a note" if event.note else "denied"

    def waiting_since(self) -> float | None:
        """When the oldest approval still waiting was asked (None: none waits)."""
        return min((e.asked_at for e in self.waiting.values() if e.asked_at is not None), default=None)

    # -- reading ---------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[Entry]:
        """The kept entries in order (the omitted ones go between the first :data:`HEAD_ENTRIES` and the rest)."""
        return [*self.head, *self.tail]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def omission(self) -> str:
        """What the views say where the omitted entries would be."""
        return (f"… {self.omitted} more entries (tool calls and messages) are left out here; the whole run is in "
                "_agent.history")

    # -- building --------------------------------------------------------------------------------------------

    @staticmethod
    def changed(entry: Entry) -> Entry:
        entry.version += 1
        return entry

    def add(self, entry: Entry) -> Entry:
        if len(self.head) < HEAD_ENTRIES and not self.tail:
            self.head.append(entry)
        else:
            if len(self.tail) == TAIL_ENTRIES:
                dropped = self.tail.popleft()
                self.omitted += 1
                if dropped.call is not None and self.calls.get(dropped.call.call_id) is dropped:
                    del self.calls[dropped.call.call_id]
            self.tail.append(entry)
        if self.on_add is not None:
            self.on_add(entry)
        return entry

    def entry_for(self, call: ToolCall) -> Entry:
        """The entry of ``call``: its own, the one made while the model wrote it, or a new one."""
        entry = self.calls.get(call.call_id)
        if entry is None:
            # The progress key is the call_id or the stream's index for it (and the loop may rename a reused id):
            # take the key if it matches, else the oldest call of that name still being written.
            key = call.call_id if call.call_id in self.writing else next(
                (k for k, e in self.writing.items() if e.name == call.name), None)
            entry = self.writing.pop(key) if key is not None else self.add(Entry("call"))
            entry.call = call
            self.calls[call.call_id] = entry
        return entry

    def finished(self, result: ToolResult) -> None:
        entry = self.changed(self.entry_for(result.call))
        entry.result = result
        self.denied += result.status == "denied"
        if result.status == "not_run":
            self.merge_not_run(entry)

    def merge_not_run(self, entry: Entry) -> None:
        """A not-run call identical to the call entry just before it is counted in that entry instead."""
        entries = self.tail if entry in self.tail else self.head
        index = entries.index(entry)
        before = entries[index - 1] if index else None
        if before is None or before.result is None or entry.result is None or not same_call(before.result,
                                                                                             entry.result):
            return
        self.changed(before).count += entry.count
        del entries[index]
        assert entry.call is not None
        self.calls.pop(entry.call.call_id, None)
        if self.on_remove is not None:
            self.on_remove(entry)

    def drop_unfinished_writing(self) -> None:
        """Calls still being written when a new round starts (or the run ends) were never sent in full."""
        for entry in self.writing.values():
            self.changed(entry).dropped = True
        self.writing.clear()
