"""The static rendering of a run: Markdown with one HTML ``<details>`` section per call, and a plain-text transcript.

This is what a saved notebook shows where widgets do not render (GitHub, nbviewer, nbconvert), and what nbval
compares. Both forms are deterministic: no timings, run ids, call ids or absolute paths.
"""

from __future__ import annotations

import difflib
import html
import json
from collections import deque
from dataclasses import dataclass, field

from ..events import ContextCompacted, Event, MessageDone, ToolCallFinished, ToolCallStarted
from ..record.context import Compaction
from ..result import LoopResult
from ..secrets import redact_text
from ..text import cut, hidden_warning, load_arguments, pretty_arguments, reveal, short_arguments
from ..tools import Display, ToolCall, ToolResult
from .kernel.code_runner import IMAGE_TYPES

TEXT_OUTPUT_CHARS = 600
HTML_OUTPUT_CHARS = 4000


CELL_WRITERS = ("add_cell", "edit_cell")
"""Tools whose ``source`` argument is a notebook cell's (shown highlighted as its type)."""
HEAD_ENTRIES = 50  # a long run's static rendering shows its first and its last entries, whatever its length
TAIL_ENTRIES = 150


@dataclass(eq=False)
class CallEntry:
    """A tool call the record shows: the call, and its result once it has one."""

    call: ToolCall
    result: ToolResult | None = None
    count: int = 1
    """How many identical not-run calls the section stands for."""


RecordEntry = str | CallEntry | Compaction
"""A message's text, a tool call, or a compaction of the model's view."""


@dataclass
class RunRecord:
    """What a run showed, in order: assistant messages (str) and tool calls (filled in as they finish).

    A long run keeps only its first :data:`HEAD_ENTRIES` and last :data:`TAIL_ENTRIES` entries and counts the ones
    between (``omitted``), so the rendering left in the notebook, and the time to make it when the run ends, stay
    bounded; the whole run is in the result's history.
    """

    head: list[RecordEntry] = field(default_factory=list)
    tail: deque[RecordEntry] = field(default_factory=lambda: deque(maxlen=TAIL_ENTRIES))
    omitted: int = 0
    calls: dict[str, CallEntry] = field(default_factory=dict)  # the calls kept, by call_id
    images: list[Display] = field(default_factory=list)
    """Every call's image displays (run_python's figures, MCP tools' images), each with its text: all of them."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, MessageDone):
            self.add(event.text)
        elif isinstance(event, ContextCompacted):
            self.add(event.compaction)
        elif isinstance(event, ToolCallStarted):
            self.add_call(event.call)
        elif isinstance(event, ToolCallFinished):
            # A call that never started (budget, abort) still gets its line when it is finished for it.
            last = self.tail[-1] if self.tail else self.head[-1] if self.head else None
            new = event.result.call_id not in self.calls
            if (new and event.result.status == "not_run" and isinstance(last, CallEntry) and last.result is not None
                    and same_call(last.result, event.result)):
                last.count += 1  # identical not-run calls (a cut response of 19 list_dir(".")) are one section
                return
            self.add_call(event.result.call).result = event.result
            self.images += [Display({k: v for k, v in d.data.items() if k in (*IMAGE_TYPES, "text/plain")},
                                    d.metadata) for d in event.result.displays if any(k in IMAGE_TYPES for k in d.data)]

    def add_call(self, call: ToolCall) -> CallEntry:
        entry = self.calls.get(call.call_id)
        if entry is None:
            entry = self.calls[call.call_id] = CallEntry(call)
            self.add(entry)
        return entry

    def add(self, entry: RecordEntry) -> None:
        if len(self.head) < HEAD_ENTRIES:
            self.head.append(entry)
            return
        if len(self.tail) == TAIL_ENTRIES:
            dropped = self.tail[0]
            self.omitted += 1
            if isinstance(dropped, CallEntry):
                self.calls.pop(dropped.call.call_id, None)
        self.tail.append(entry)

    @property
    def entries(self) -> list[RecordEntry]:
        """The kept entries in order (the omitted ones would go between the first HEAD_ENTRIES and the rest)."""
        return [*self.head, *self.tail]

    def omission(self) -> str:
        return (f"… {self.omitted} more entries (tool calls and messages) are left out here; the whole run is in "
                "_agent.history")


def headline(result: LoopResult) -> str:
    compacted = result.compactions
    return (f"agent: {result.status} · {result.rounds} round{'s' * (result.rounds != 1)} · "
            f"{result.tool_calls} tool call{'s' * (result.tool_calls != 1)}"
            + (f" · {result.denied}" if result.denied_calls else "")
            + f" · {result.usage.line}"
            + (f" · {compacted} compaction{'s' * (compacted != 1)}" if compacted else ""))


def call_title(call: ToolCall, result: ToolResult | None = None, count: int = 1) -> str:
    """``list_dir(path=".") · not_run``, with `` × 19`` for a section standing for identical calls."""
    shown = reveal(short_arguments(redact_text(call.arguments)))[0]
    return (f"{call.name}({shown}) · {result.status if result else 'running'}"
            + (f" × {count}" if count > 1 else ""))


def same_call(a: ToolResult, b: ToolResult) -> bool:
    """Whether two finished calls would show the same section (name, arguments, status and output)."""
    return (a.name, a.arguments, a.status, a.output) == (b.name, b.arguments, b.status, b.output)


def arguments_html(arguments: str, name: str = "") -> str:
    """A call's arguments for the panel: a ``code`` argument as highlighted Python (run_python's) under its line
    count, the ``source`` of add_cell / edit_cell highlighted as its cell type, else indented JSON. Invisible and
    bidirectional control characters are shown as ``⟨U+202E⟩`` and counted in a warning above (:func:`reveal`)."""
    try:
        value = load_arguments(arguments)
    except (ValueError, RecursionError, TypeError):  # not JSON, or nested too deeply to read: shown as given
        value = None
    key = "code" if name not in CELL_WRITERS else "source"
    if isinstance(value, dict) and isinstance(value.get(key), str):
        language = "markdown" if value.get("cell_type") == "markdown" else "python"
        what = "code" if key == "code" else f"{'markdown' if language == 'markdown' else 'code'} cell"
        rest = {k: v for k, v in value.items() if k not in (key, "cell_type")}  # the line above names the type
        code, hidden = reveal(value[key])
        others, hidden_elsewhere = reveal(pretty_arguments(json.dumps(rest)) if rest else "")
        lines = len(value[key].rstrip("\n").splitlines())
        return (warning_html(hidden_warning(hidden + hidden_elsewhere, "code" if key == "code" else "cell"))
                + f"<div><i>{what} · {lines} line{'s' * (lines != 1)}</i></div>" + highlighted(code, language)
                + (f"<pre style='margin: 0'>{html.escape(others)}</pre>" if rest else ""))
    shown, hidden = reveal(pretty_arguments(arguments))
    return warning_html(hidden_warning(hidden, "call")) + f"<pre style='margin: 0 0 6px'>{html.escape(shown)}</pre>"


def change_html(old: str, new: str) -> str:
    """An edit of a cell's source for its approval: a unified diff (old -> new), highlighted, invisible characters
    shown and the new source's counted (:func:`reveal`)."""
    new, hidden = reveal(new)
    lines = list(difflib.unified_diff(reveal(old)[0].splitlines(), new.splitlines(), "before", "after", lineterm="",
                                      n=3))
    return (warning_html(hidden_warning(hidden, "cell")) + "<div><i>the change · before → after</i></div>"
            + highlighted("\n".join(lines) or "(no change)", "diff"))


def warning_html(warning: str) -> str:
    """A warning above a call's arguments (``""`` for none)."""
    return f'<div style="color: #c62828"><b>⚠ {html.escape(warning)}</b></div>' if warning else ""


def highlighted(text: str, language: str) -> str:
    """``text`` as HTML highlighted by Pygments (IPython's own dependency) for ``language``."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    return highlight(text, get_lexer_by_name(language), HtmlFormatter(noclasses=True, nobackground=True))


def render_text(result: LoopResult, record: RunRecord) -> str:
    """The plain-text transcript of a run."""
    lines = [headline(result)]
    for index, entry in enumerate(record.entries):
        if index == HEAD_ENTRIES and record.omitted:
            lines.append(record.omission())
        if isinstance(entry, str):
            lines.append(entry.strip())
        elif isinstance(entry, Compaction):
            lines.append(f"⟲ {entry.title}")
        else:
            lines.append(f"▸ {call_title(entry.call, entry.result, entry.count)}")
            output = entry.result.output if entry.result else ""
            lines.extend(f"  │ {line}" for line in cut(output, TEXT_OUTPUT_CHARS).splitlines())
    if result.status != "complete":
        lines.append(result.summary)
    return "\n".join(lines)


def render_markdown(result: LoopResult, record: RunRecord) -> str:
    """The run as Markdown (with HTML for the calls): the headline, the messages as the model wrote them, rendered
    rather than shown as typed, and one collapsed ``<details>`` section per tool call.

    The saved rendering has this and the plain text only: JupyterLab, Notebook 7, nbconvert and VS Code prefer a
    ``text/html`` part to a ``text/markdown`` one, and HTML would show the model's Markdown as typed.

    A call's section is one line of HTML (newlines as ``&#10;``): a blank line in an output would end the HTML
    block and let Markdown read the rest of it.
    """
    esc = html.escape

    def one_line(text: str) -> str:
        return esc(text).replace("\n", "&#10;")

    parts = [f"**{esc(headline(result))}**"]
    for index, entry in enumerate(record.entries):
        if index == HEAD_ENTRIES and record.omitted:
            parts.append(f"*{esc(record.omission())}*")
        if isinstance(entry, str):
            parts.append(entry.strip())
        elif isinstance(entry, Compaction):
            parts.append(f"*⟲ {esc(entry.title)}*")
        else:
            title = call_title(entry.call, entry.result, entry.count)
            output = entry.result.output if entry.result else ""
            parts.append(f"<details><summary><code>{esc(title)}</code></summary>"
                         f"<p>arguments</p><pre>{one_line(pretty_arguments(entry.call.arguments))}</pre>"
                         f"<p>output</p><pre>{one_line(cut(output, HTML_OUTPUT_CHARS))}</pre></details>")
    if result.status != "complete":
        parts.append(f"**{esc(result.summary)}**")
    return "\n\n".join(parts)
