"""A served session leaves its record (issue 40), in JupyterLab with agentkernel's extension and Chromium.

The notebook serves its tools; an outside agent (the official ``mcp`` client, in this test's process) reads a
variable and asks to run ``run_python``, which the user denies in the panel with a note; the user clicks Stop, and
the serving cell's panel becomes the session's record. The notebook is saved and the server stopped; a new server,
which trusts no notebook, opens it with a fresh kernel and no widget state: the record is there (the calls, the
denial and its note, why it ended), with no widget and no widget error. The saved file holds no token.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab import NotebookPage, start_lab, wait_saved

expect = pytest.importorskip("playwright.sync_api").expect
pytest.importorskip("mcp")

pytestmark = pytest.mark.browser

NOTE = "use the parquet file instead"
CELLS = [
    "%load_ext agentkernel\nimport os\nos.environ.pop('CI', None)\nanswer = 42",
    "%agent_serve --tools inspect_variable,run_python",
    "print([(c.name, c.status) for c in _agent_serve.calls])",
]


class OutsideAgent(threading.Thread):
    """The official ``mcp`` client on its own thread and event loop (Playwright's sync API keeps the test's):
    reads ``answer``, then asks to run ``run_python``; what it was told is kept."""

    def __init__(self, url: str, token: str):
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.told: list[tuple[bool, str]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(asyncio.wait_for(self.calls(), 120))
        except BaseException as e:  # noqa: BLE001 - the test reports it
            self.error = e

    async def calls(self) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"},
                                      timeout=httpx2.Timeout(30.0, read=None)) as http, \
                Client(streamable_http_client(self.url, http_client=http)) as client:
            for name, arguments in (("inspect_variable", {"name": "answer"}),
                                    ("run_python", {"code": "answer = 0"})):
                result = await client.call_tool(name, arguments)
                self.told.append((result.is_error, "".join(p.text for p in result.content if p.type == "text")))


def test_a_served_session_leaves_its_record_after_stop_save_and_reopen(browser: Any, tmp_path: Path) -> None:
    root, name = tmp_path / "root", "served.ipynb"
    root.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                       "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(notebook, root / name)

    server = start_lab(root, tmp_path / "work-1")
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        nb = NotebookPage(context, server, name)
        nb.run_and_wait(0, 60)
        nb.run_and_wait(1)
        expect(nb.output(1)).to_contain_text("serving this kernel's tools over MCP")
        codes = nb.output(1).locator("code").all_text_contents()
        url = next(c for c in codes if re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", c))
        token_file = Path(next(c for c in codes if c.endswith(".token")))
        token = token_file.read_text().strip()
        agent = OutsideAgent(url, token)
        agent.start()
        box = nb.output(1).get_by_placeholder("Deny with a note")
        expect(box).to_be_enabled(timeout=60_000)  # the read ran; run_python asks
        box.fill(NOTE)
        nb.button(1, "Deny").click()
        agent.join(60)
        assert not agent.is_alive() and agent.error is None, agent.error
        assert [error for error, _ in agent.told] == [False, True] and NOTE in agent.told[1][1], agent.told
        nb.stop_button(1).click()
        record = nb.output(1).locator(".jp-RenderedHTMLCommon").filter(has_text="agent_serve: ended")
        expect(record).to_contain_text("agent_serve: ended · 2 calls · 1 denied", timeout=30_000)
        expect(nb.widget_views(1)).to_have_count(0)
        assert not token_file.exists()  # removed with the session
        nb.run_and_wait(2)
        expect(nb.output(2)).to_have_text("[('inspect_variable', 'ok'), ('run_python', 'denied')]")
        nb.shot("serve-record-1-stopped", 1)
        nb.page.keyboard.press("Escape")
        nb.page.keyboard.press("Control+s")
        saved = wait_saved(root / name, lambda s: any("agent_serve: ended" in o.get("data", {}).get("text/html", "")
                                                       for o in s.cells[1].outputs))
        nb.close()
        context.close()
    finally:
        server.stop()

    whole = (root / name).read_text()
    assert token not in whole and not [token[i:i + 8] for i in range(len(token) - 7) if token[i:i + 8] in whole]
    outputs = saved.cells[1].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)

    # A new server that trusts nothing (no signature database), a fresh kernel, no widget state.
    server = start_lab(root, tmp_path / "work-2", options=("--NotebookNotary.db_file=:memory:",))
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        nb = NotebookPage(context, server, name)
        record = nb.output(1).locator(".jp-RenderedHTMLCommon").filter(has_text="agent_serve: ended")
        expect(record).to_contain_text("agent_serve: ended · 2 calls · 1 denied", timeout=30_000)
        expect(record).to_contain_text("connected: mcp")
        expect(record).to_contain_text("approval: run_python · denied with a note")
        expect(record).to_contain_text("why it ended: stopped with the Stop button")
        sections = record.locator("details")
        expect(sections.locator("summary")).to_have_text([re.compile(r'^inspect_variable\(name="answer"\) · ok'),
                                                          re.compile(r'^run_python\(code="answer = 0"\) · denied')])
        sections.nth(1).locator("summary").click()
        expect(sections.nth(1)).to_contain_text(f"denied by the user: {NOTE}")
        expect(nb.widget_views(1)).to_have_count(0)
        expect(nb.page.get_by_text(re.compile("Error displaying widget|model not found"))).to_have_count(0)
        nb.shot("serve-record-2-reopened", 1)
        nb.close()
        context.close()
    finally:
        server.stop()
