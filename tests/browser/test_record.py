"""The notebook you keep: a finished run stays readable wherever the notebook is opened, in JupyterLab and
Notebook 7 with agentkernel's extension and Chromium.

A run reads the notebook, asks to run ``run_python`` (which draws a figure), ``add_cell`` and ``edit_cell`` (the
status line says ``waiting for approval`` while each waits); the notebook is saved and the server stopped. A new
server, which trusts no notebook (a student opening the teacher's file), opens it with a fresh kernel and no widget
state: the answer, the collapsible calls and the figure are shown, and no widget error. ``nbconvert --to html`` of
the same file shows the same sections. Screenshots go to docs/_static/ (``record-*``) and artifacts/browser/.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab import ARTIFACTS, REPO, NotebookPage, start_lab, wait_saved

from agentkernel.jupyter.kernel.undo import UNDO_MIME

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = pytest.mark.browser

DOCS_STATIC = REPO / "docs" / "_static"
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('rain by month')\n"
ANSWER = "The figure is **drawn**, a cell added and `y` changed."
SETUP = ("%load_ext agentkernel\nfrom agentkernel import Call, ScriptedModel\n"
         f"PLOT = {PLOT!r}\n"
         "m = ScriptedModel([Call('read_notebook'), Call('run_python', {'code': PLOT}),\n"
         "                   Call('add_cell', {'source': 'total = y + 1'}),\n"
         "                   Call('edit_cell', {'cell_id': 'user', 'source': 'y = 2'}),\n"
         f"                   {ANSWER!r}])")
CELLS = [("setup", SETUP), ("user", "y = 1\ny"), ("agent", "%%agent -m m\nDraw the rain, add a total, change y.")]
CALLS = [r"read_notebook\(\) · ok", r"run_python\(code=.*\) · ok · plt \(new\)",  # the variables it changed
         r'add_cell\(source="total = y \+ 1"\) · ok', r'edit_cell\(cell_id="user", source="y = 2"\) · ok']


def shot(nb: NotebookPage, name: str, index: int | None = None) -> None:
    """A screenshot in artifacts/browser/ and, for the docs, in docs/_static/."""
    path = nb.shot(name, index)
    DOCS_STATIC.mkdir(exist_ok=True)
    shutil.copy(path, DOCS_STATIC / path.name)


def expect_record(nb: NotebookPage, index: int) -> None:
    """The run's record: the headline, the answer rendered, one collapsed section per call, no widget."""
    expect(nb.status(index)).to_contain_text(re.compile(r"^agent: complete · 5 rounds · 4 tool calls · "))
    expect(nb.record(index).locator("strong").filter(has_text="drawn")).to_have_count(1)  # the answer's Markdown
    summaries = nb.sections(index).locator("summary")
    expect(summaries).to_have_text([re.compile(c) for c in CALLS])
    expect(nb.widget_views(index)).to_have_count(0)
    expect(nb.page.get_by_text(re.compile("Error displaying widget|model not found"))).to_have_count(0)


def open_figure(nb: NotebookPage, index: int) -> None:
    """Expand run_python's section; its figure shows, at its size."""
    section = nb.sections(index).nth(1)
    image = section.locator("img")
    expect(image).to_be_hidden()
    section.locator("summary").click()
    expect(section).to_contain_text("plt.title('rain by month')")
    expect(image).to_be_visible()
    box = image.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 150, box


def test_a_saved_run_reads_the_same_after_a_server_restart_with_a_fresh_kernel(
        front_end: str, browser: Any, tmp_path: Path) -> None:
    root, name = tmp_path / "root", "kept.ipynb"
    root.mkdir()
    nb_file = nbformat.v4.new_notebook()
    nb_file.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb_file.cells = [nbformat.v4.new_code_cell(source, id=cell_id) for cell_id, source in CELLS]
    nbformat.write(nb_file, root / name)

    server = start_lab(root, tmp_path / "work-1", front_end=front_end)
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        nb = NotebookPage(context, server, name)
        nb.run_and_wait(0, 60)
        nb.run_and_wait(1)
        nb.run(2)
        for asked in ("run_python", "add_cell", "edit_cell"):
            approve = nb.button(2, "Approve").last
            expect(approve).to_be_enabled(timeout=30_000)
            expect(nb.status(2)).to_contain_text(re.compile(r"^waiting for approval \(\d+ s\)"))
            expect(nb.output(2)).to_contain_text(f"waiting for approval: {asked} has side effects")
            if asked == "run_python":
                shot(nb, f"record-{front_end}-1-waiting", 2)
            approve.click()
        nb.wait_done(2, 60)
        expect_record(nb, 2)
        expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(4)  # the added cell, below the agent's
        open_figure(nb, 2)
        shot(nb, f"record-{front_end}-2-finished", 2)
        nb.page.keyboard.press("Escape")
        nb.page.keyboard.press("Control+s")
        saved = wait_saved(root / name, lambda s: len(s.cells) == 4 and s.cells[1].source == "y = 2"
                           and any(o.get("output_type") == "display_data" for o in s.cells[2].outputs))
        nb.close()
        context.close()
    finally:
        server.stop()

    # What was saved: the panel's display emptied in place, then the record; no widget view, no widget state.
    agent_outputs = saved.cells[2].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in agent_outputs)
    assert "widgets" not in saved.metadata
    assert len([o for o in agent_outputs if "text/html" in o.get("data", {})]) == 1  # the record, once
    (undo,) = [o for o in agent_outputs if UNDO_MIME in o.get("data", {})]  # below it
    edited = saved.cells[1].metadata["agentkernel"]
    assert edited["source_changed"] is True and undo["data"][UNDO_MIME]["cells"] == 2
    assert edited["run_id"] == undo["metadata"][UNDO_MIME]["run_id"]
    assert saved.cells[1].execution_count is None  # its outputs were made by the old source

    # A new server that trusts nothing (no signature database), a fresh kernel, no widget state.
    server = start_lab(root, tmp_path / "work-2", front_end=front_end,
                       options=("--NotebookNotary.db_file=:memory:",))
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        nb = NotebookPage(context, server, name)
        expect_record(nb, 2)
        open_figure(nb, 2)
        nb.sections(2).nth(3).locator("summary").click()
        expect(nb.sections(2).nth(3)).to_contain_text('"source": "y = 2"')
        shot(nb, f"record-{front_end}-3-reopened", 2)
        nb.close()
        context.close()
    finally:
        server.stop()

    # nbconvert's HTML of the same file: the same sections, the figure, the answer, no widget.
    html = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--stdout",
                           str(root / name)], capture_output=True, text=True, check=True, timeout=120).stdout
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"record-{front_end}.html").write_text(html)
    summaries = re.findall(r"<summary><code>(.*?)</code></summary>", html)
    assert [re.fullmatch(c, s.replace("&quot;", '"')) is not None for c, s in zip(CALLS, summaries, strict=True)] \
        == [True] * 4, summaries
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', html)) == 1 and "<strong>drawn</strong>" in html
    assert "Error displaying widget" not in html
