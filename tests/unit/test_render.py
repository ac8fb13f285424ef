"""The static record (agentkernel/jupyter/render.py): what a finished run's cell shows and nbval compares. It is
deterministic (no timings, run ids or call ids), shows each call once with its final outcome and its images, holds
no widget view, and stays bounded for a long run."""

from __future__ import annotations

import base64
import re

from live_html import live_parts
from runtime_helpers import run_sync

from agentkernel import Call, ScriptedModel, tool
from agentkernel.jupyter.cell import WIDGET_VIEW
from agentkernel.jupyter.render import record_bundle, render_html, render_text
from agentkernel.listeners.timeline import HEAD_ENTRIES, TAIL_ENTRIES, Timeline
from agentkernel.record.images import IMAGE_TYPES
from agentkernel.tools import Display, ToolOutput
from agentkernel.usage import Limits

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 20).decode()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool
def plot(kind: str) -> ToolOutput:
    """Draw a figure."""
    mime = {"svg": "image/svg+xml", "webp": "image/webp"}.get(kind, "image/png")
    data = "<svg xmlns='http://www.w3.org/2000/svg'/>" if kind == "svg" else PIXEL
    return ToolOutput(f"drew a {kind}", displays=[Display({mime: data, "text/plain": f"<Figure {kind}>"}),
                                                  Display({"text/plain": "not an image"})])


def record_of(script: list, **options) -> tuple:
    record = Timeline()
    result = run_sync("go", model=ScriptedModel(script), tools=[lookup, plot], on_event=record, **options)
    return result, record


def test_a_run_renders_the_same_text_every_time_with_each_call_once() -> None:
    script = [[Call("lookup", {"key": "a"}), Call("lookup", {"key": "b"})], "**a** and *b*"]
    first, second = (render_text(*record_of(script)) for _ in range(2))
    assert first == second
    assert first.splitlines() == [
        "agent: complete · 2 rounds · 2 tool calls · 7 in · 23 out · cost unknown",  # the scripted model counts words
        '▸ lookup(key="a") · ok', "  │ value of a",
        '▸ lookup(key="b") · ok', "  │ value of b",
        "**a** and *b*",
    ]


def test_the_html_renders_the_answer_and_escapes_what_the_tools_wrote() -> None:
    page = render_html(*record_of([[Call("lookup", {"key": "<script>\n\nx"})], "**done**: `a` <b>raw</b>"]))
    assert "<script>" not in page and "&lt;script&gt;" in page
    # the answer rendered from the model's Markdown, its raw HTML shown as typed
    assert page.endswith("<p><strong>done</strong>: <code>a</code> &lt;b&gt;raw&lt;/b&gt;</p>\n</div>\n</div>")
    (section,) = [part for part in page.split("\n") if part.startswith("<details>")]
    assert "&#10;" in section  # one line: the record's sections are found and counted by line
    assert live_parts(page) == []


def test_what_the_model_and_tools_wrote_cannot_drive_a_terminal() -> None:
    """ANSI and OSC escape sequences in an answer or an output are shown in the plain text, not sent raw."""
    evil = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b]0;owned\x07done\r\nnext\x9b31m"
    text = render_text(*record_of([[Call("lookup", {"key": evil})], evil]))
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text and "\r" not in text
    assert "⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩" in text and "done\nnext⟨U+009B⟩31m" in text


def test_the_record_holds_no_widget_view_and_shows_each_image_in_its_calls_section() -> None:
    result, record = record_of([[Call("plot", {"kind": kind}) for kind in ("png", "svg", "webp")], "drawn"])
    bundle = record_bundle(result, record)
    assert set(bundle) == {"text/html", "text/plain"} and WIDGET_VIEW not in bundle
    assert live_parts(bundle["text/html"], allow_data_images=True) == []
    sections = [part for part in bundle["text/html"].split("\n") if part.startswith("<details>")]
    assert len(sections) == 3
    for section, mime in zip(sections, ("image/png", "image/svg+xml", "image/webp"), strict=True):
        assert mime in IMAGE_TYPES
        (src,) = re.findall(r'<img src="data:([^;]+);base64,([^"]+)"', section)
        assert src[0] == mime and base64.b64decode(src[1])  # the data inline, valid base64 (SVG encoded too)
        assert "\n" not in section and "not an image" not in section  # a text display is not an image


def test_calls_a_budget_refused_are_shown_with_their_status_and_the_summary_ends_it() -> None:
    result, record = record_of([[Call("lookup", {"key": "a"}), Call("lookup", {"key": "b"})], "never"],
                               limits=Limits(max_tool_calls=1))
    text = render_text(result, record)
    assert '▸ lookup(key="b") · not_run' in text and "not run: tool-call budget exhausted" in text
    assert text.splitlines()[-1] == result.summary and "HIT_TOOL_CALL_CAP" in result.summary


def test_a_long_run_keeps_its_first_and_last_entries_and_counts_the_rest() -> None:
    rounds = 400
    result, record = record_of([Call("lookup", {"key": str(i)}) for i in range(rounds)] + ["done"])
    assert len(record.entries) == HEAD_ENTRIES + TAIL_ENTRIES
    assert record.omitted == rounds + 1 - HEAD_ENTRIES - TAIL_ENTRIES
    text = render_text(result, record)
    assert f"… {record.omitted} more entries" in text and 'lookup(key="399")' in text and 'lookup(key="0")' in text


def test_an_add_cell_approval_names_the_cell_type_once():
    import json

    from agentkernel.jupyter.render import arguments_html

    shown = arguments_html(json.dumps({"source": "x = 1", "cell_type": "code", "after": "abc"}), "add_cell")
    assert "code cell · 1 line" in shown and "cell_type" not in shown and "after" in shown


@tool
def hostile(n: int) -> ToolOutput:
    """Return an image whose data tries to leave the attribute."""
    return ToolOutput("drew", displays=[Display({"image/png": 'AAAA" onerror="alert(1)', "text/plain": '"><script>'})])


def test_image_data_that_is_not_base64_never_reaches_the_html() -> None:
    record = Timeline()
    result = run_sync("go", model=ScriptedModel([Call("hostile", {"n": 1}), "done"]), tools=[hostile],
                      on_event=record)
    page = render_html(result, record)
    assert "onerror" not in page and "<script>" not in page and "<img" not in page
    assert "image/png not shown: its data is not base64" in page


def test_the_result_display_and_a_stop_error_show_escape_sequences_rather_than_send_them() -> None:
    from agentkernel.jupyter.errors import STOP_ERRORS

    evil = "\x1b]0;owned\x07\x1b[2Jdone"
    result, _ = record_of([evil])
    result.detail, result.status = f"lookup {evil}", "repeated_tool_call"
    pretty = "\n".join(result._summary_lines())
    assert "\x1b" not in pretty and "\x07" not in pretty and "⟨U+001B⟩]0;owned⟨U+0007⟩" in pretty
    error = str(STOP_ERRORS["repeated_tool_call"](result))
    assert error.startswith("REPEATED_TOOL_CALL: lookup ⟨U+001B⟩") and "\x1b" not in error
