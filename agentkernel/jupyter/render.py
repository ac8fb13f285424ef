"""The static record of a run: HTML with one ``<details>`` section per call, and a plain-text transcript.

When a run ends, whatever its status, this is what its cell shows in place of the live panel: a view of the run's
:class:`~agentkernel.listeners.timeline.Timeline`, as the panel is the live one. It holds no widget, so it reads the
same in JupyterLab and Notebook 7 with a fresh kernel, in VS Code, nbconvert, GitHub and nbviewer, and it is what
nbval compares. Both forms are deterministic: no timings, run ids, call ids or absolute paths.

What the model and the tools wrote is data: the messages go through :func:`.markup.markdown_html` (nothing runs,
nothing is fetched), every other text is escaped, and the only images are the tools' own figures, inline as
``data:`` URIs of checked base64 (:func:`image_html`). The plain text shows control characters (an ANSI or OSC
escape a model wrote) as ``⟨U+001B⟩``, so a terminal shows them rather than obeys them.
"""

from __future__ import annotations

import base64
import difflib
import html
import json
import re
from typing import Any

from ..listeners.timeline import Entry, Timeline
from ..record.images import IMAGE_TYPES
from ..result import LoopResult
from ..text import cut, hidden_warning, load_arguments, pretty_arguments, reveal
from ..tools import Display
from .markup import NO_MATH, markdown_html

TEXT_OUTPUT_CHARS = 600
HTML_OUTPUT_CHARS = 4000
BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
CELL_WRITERS = ("add_cell", "edit_cell")
"""Tools whose ``source`` argument is a notebook cell's (shown highlighted as its type)."""


def headline(result: LoopResult) -> str:
    """``agent: complete · 2 rounds · ...``: the record's first line."""
    return f"agent: {result.status_line}"


def record_bundle(result: LoopResult, timeline: Timeline) -> dict[str, Any]:
    """The record as a MIME bundle: HTML and plain text (no widget view: nothing to fail to render)."""
    return {"text/html": render_html(result, timeline), "text/plain": render_text(result, timeline)}


def render_text(result: LoopResult, timeline: Timeline) -> str:
    """The plain-text transcript of a run (control characters shown as ``⟨U+001B⟩``: :func:`plain`)."""
    lines = [headline(result)]
    for index, entry in enumerate(timeline):
        if index == len(timeline.head) and timeline.omitted:
            lines.append(timeline.omission())
        if entry.kind == "message":
            lines.append(entry.message.strip())
        elif entry.kind == "compaction":
            lines.append(f"⟲ {entry.name}")
        elif entry.kind == "approval":
            lines.append(entry.title())  # "approval: write · approved", in words
        elif entry.call is not None:
            lines.append(f"▸ {entry.title()}")
            output = entry.result.output if entry.result else ""
            lines.extend(f"  │ {line}" for line in plain(cut(output, TEXT_OUTPUT_CHARS)).splitlines())
    if result.status != "complete":
        lines.append(result.summary)
    return plain("\n".join(lines))


def plain(text: str) -> str:
    """``text`` for a plain-text view: line ends made ``\\n`` and every other control or invisible character
    shown as ``⟨U+001B⟩`` (:func:`reveal`), so an escape sequence a model wrote cannot drive a terminal."""
    return reveal(text.replace("\r\n", "\n"))[0]


def render_html(result: LoopResult, timeline: Timeline) -> str:
    """The run as HTML: the headline, the messages rendered from the model's Markdown (:func:`markdown_html`: no
    raw HTML, no image loaded), and one collapsed ``<details>`` section per tool call with its arguments, its output
    and its images.

    HTML rather than Markdown: JupyterLab renders the HTML inside a ``text/markdown`` output live, and every front
    end (JupyterLab, Notebook 7, nbconvert, VS Code) prefers a ``text/html`` part anyway.
    """
    esc = html.escape
    parts = [f"<p><b>{esc(headline(result))}</b></p>"]
    for index, entry in enumerate(timeline):
        if index == len(timeline.head) and timeline.omitted:
            parts.append(f"<p><i>{esc(timeline.omission())}</i></p>")
        if entry.kind == "message":
            parts.append(markdown_html(entry.message.strip()))
        elif entry.kind in ("compaction", "approval"):
            parts.append(f"<p><i>{'⟲ ' * (entry.kind == 'compaction')}{esc(entry.title())}</i></p>")
        elif entry.call is not None:
            parts.append(call_section(entry))
    if result.status != "complete":
        parts.append(f"<p><b>{esc(result.summary)}</b></p>")
    return f'<div class="agentkernel-record {NO_MATH}">\n' + "\n".join(parts) + "\n</div>"


def call_section(entry: Entry) -> str:
    """A call as one line of HTML: ``<details>`` titled by the call, with its arguments, output and images."""
    assert entry.call is not None
    output = entry.result.output if entry.result else ""
    images = "".join(image_html(d) for d in entry.images)
    return (f"<details><summary><code>{html.escape(entry.title())}</code></summary>"
            f"<p>arguments</p><pre>{one_line(pretty_arguments(entry.call.arguments))}</pre>"
            f"<p>output</p><pre>{one_line(cut(output, HTML_OUTPUT_CHARS))}</pre>{images}</details>")


def one_line(text: str) -> str:
    return html.escape(text).replace("\n", "&#10;")


def image_html(display: Display) -> str:
    """A display's first image as an ``<img>`` with its data inline (its text as the alternative); data that is
    not base64 (a hostile tool's attribute break-out) is left out, and a line says so."""
    mime = next(m for m in IMAGE_TYPES if m in display.data)
    data = display.data[mime]
    if mime == "image/svg+xml":  # SVG comes as text, the others as base64
        data = base64.b64encode(str(data).encode()).decode()
    data = "".join(str(data).split())
    if not BASE64.fullmatch(data):
        return f"<p><i>{html.escape(mime)} not shown: its data is not base64</i></p>"
    alt = one_line(str(display.data.get("text/plain", mime)))
    return f'<p><img src="data:{mime};base64,{data}" alt="{alt}"></p>'


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
