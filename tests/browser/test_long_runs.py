"""A 1000-call ``%%agent`` run in a real JupyterLab and Chromium: the page stays quick, Stop stays immediate.

The live panel keeps the newest calls as widgets and folds older ones into one HTML block, so the page holds a few
widget views however long the run. Run with ``python -m pytest -m browser tests/browser/test_long_runs.py``; the
figures are printed at the end of the run and saved with the screenshots in artifacts/browser/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from lab import MEASUREMENTS, LabServer, NotebookPage, write_notebook
from timing import STOP_BOUND_BUSY

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = pytest.mark.browser

SETUP = """\
%load_ext agentkernel
import asyncio
from agentkernel import Call, ScriptedModel, tool

@tool
async def noop(i: int) -> str:
    "Do nothing, quickly."
    return "ok"

@tool
async def tick(i: int) -> str:
    "Take a moment."
    await asyncio.sleep(0.01)
    return "ok"

fast = ScriptedModel([Call("noop", {"i": i}) for i in range(1000)] + ["All 1000 done."])
endless = ScriptedModel(lambda request: Call("tick", {"i": len(request.history) // 2}))
"""

CELLS = [
    SETUP,
    "%%agent -m fast --tools noop\nCall noop a thousand times.",
    "%%agent -m endless --tools tick\nCall tick until stopped.",
    "print('after stop:', _agent.status, _agent.tool_calls)",
]

# Clicks the section's summary in the page and waits, frame by frame, until its contents are shown.
EXPAND = """async (header) => {
    const contents = header.closest('details').querySelector('pre');
    const frame = () => new Promise(resolve => requestAnimationFrame(resolve));
    const start = performance.now();
    header.click();
    while (contents.offsetHeight === 0) await frame();
    await frame();  // painted
    return (performance.now() - start) / 1000;
}"""

OpenNotebook = Callable[[str], NotebookPage]
# The goals are 0.5 s for Stop and 0.3 s for expanding a section (measured 0.15-0.3 s and 8-27 ms on the shared
# 2-core VM); the assertions leave twice that for busier machines (STOP_BOUND_BUSY), and every run prints its figures.
EXPAND_BOUND = 0.6


@pytest.fixture(scope="module", autouse=True)
def notebook(lab_server: LabServer) -> None:
    write_notebook(lab_server.root / "long.ipynb", CELLS)


def test_a_thousand_calls_stay_quick_to_expand_and_to_stop(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("long.ipynb")
    nb.run_and_wait(0)

    # A finished 1000-call run: its record keeps the first 50 and last 150 entries and counts the rest.
    nb.run_and_wait(1, timeout=120)
    expect(nb.status(1)).to_contain_text("complete · 1001 rounds · 1000 tool calls")
    expect(nb.output(1)).to_contain_text("All 1000 done.")
    expect(nb.widget_views(1)).to_have_count(0)
    sections = nb.sections(1)
    expect(sections).to_have_count(199)  # the last kept entry is the answer
    expect(nb.record(1)).to_contain_text("… 801 more entries (tool calls and messages) are left out here")
    newest = sections.last.locator("summary")
    expect(newest).to_have_text('noop(i=999) · ok')
    seconds = nb.page.evaluate(EXPAND, newest.element_handle())
    MEASUREMENTS.append(f"1000-call run: expanding the newest call's section took {seconds * 1000:.0f} ms")
    expect(sections.last).to_contain_text('"i": 999')
    assert seconds < EXPAND_BOUND, f"expanding the newest section took {seconds:.3f} s"
    nb.shot("long-1-finished", 1)

    # Stopped after more than 1000 calls: the cell ends at once, and the next cell sees the result.
    nb.run(2)
    started = time.monotonic()
    expect(nb.status(2)).to_contain_text(re.compile(r"running · 1[0-9]{3} rounds "), timeout=120_000)
    seen = time.monotonic()
    # While it runs, the newest calls are live sections and the rest are folded into a block that expands.
    live = nb.output(2).locator(".jupyter-widget-Collapse")
    assert live.count() <= 10, live.count()
    fold = nb.output(2).locator("details").filter(has_text="earlier entries folded").first
    expect(fold).to_contain_text(re.compile(r"\d+ earlier entries folded \(\d+ calls\)"))
    # Queue the next cell from the keyboard: its prompt moves while the run's panel above it changes height.
    nb.page.keyboard.press("j")
    nb.page.keyboard.press("Control+Enter")
    nb.wait_prompt(3, re.compile(r"^\[\*\]:$"))
    nb.arm_timer(2, nb.stop_button(2), "aborted")
    # The notebook scrolls to keep the selected (queued) cell in view while the panel above it changes height, so
    # Playwright never finds the button "stable"; dispatch the click on it as the page would on a person's click.
    nb.stop_button(2).dispatch_event("click")
    latency = nb.latency()
    nb.wait_done(3)
    nb.shot("long-2-stopped", 2)
    MEASUREMENTS.append(f"Stop after 1000+ calls (round 1000 seen {seen - started:.1f} s after the start, click "
                        f"{time.monotonic() - seen:.1f} s later): {latency}")
    assert latency.done < STOP_BOUND_BUSY, f"the cell ended {latency.done:.3f} s after the click"
    expect(nb.status(2)).to_contain_text("aborted")
    expect(nb.errors(2)).to_have_count(0)
    expect(nb.output(3)).to_have_text(re.compile(r"after stop: aborted 1\d{3}"))
