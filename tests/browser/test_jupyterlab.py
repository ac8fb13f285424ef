"""``%%agent`` end to end in a real JupyterLab and Chromium: Stop, tool-call sections, guard errors, interrupt,
approval (approve for the run, deny with a note, of an MCP server's tool), and Claude Code connected to
``%agent_serve`` with the panel's snippet, its call denied with a note in the panel.

The kernel-level tests prove the protocol with a bare kernel client; these prove what a person sees. JupyterLab 4.6
sends widget clicks as ``comm_msg`` tagged with a kernel-subshell id, so only a real front end shows whether the
Stop button still reaches an awaiting ``%%agent`` cell. Run with ``python -m pytest -m browser tests/browser``;
screenshots of every step go to artifacts/browser/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import flows
import pytest
import serve_clients
from flows import NOTES, SETUP, start_slow_run
from lab import MEASUREMENTS, LabServer, NotebookPage, write_notebook
from serve_clients import CLAUDE, NODE

# Skip (not fail collection) where the browser extra is not installed.
expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = pytest.mark.browser

NOTEBOOKS = {
    **flows.NOTEBOOKS,
    "guard.ipynb": [
        SETUP + "looping = ScriptedModel([Call('read_file', {'path': 'notes.txt'})] * 5)",
        "%%agent -m looping --tools read_file\nRead the notes.",
        "print('after guard:', _agent.status)",
    ],
    "interrupt.ipynb": [
        flows.NOTEBOOKS["stop.ipynb"][0],
        "%%agent -m slow\nTell me a long story.",
        "print('after interrupt:', _agent.status)",
    ],
    "approval.ipynb": [
        SETUP + '''
@tool(read_only=False)
def write_note(text: str) -> str:
    """Append a line to note.txt."""
    with open("note.txt", "a") as f:
        f.write(text + "\\n")
    return f"wrote {len(text)} characters"

def approval_model():
    return ScriptedModel([Call("write_note", {"text": "hello"}), "Done."])

to_approve, to_deny = approval_model(), approval_model()''',
        "%%agent -m to_approve --tools write_note\nWrite hello into the note.",
        "%%agent -m to_deny --tools write_note\nWrite hello into the note.",
    ],
    "trojan.ipynb": [
        SETUP + """
# Reads as `level = "user"` with a comment after it; it sets "admin" (Trojan Source, CVE-2021-42574).
TROJAN = 'level = "user\\u202e \\u2066# check if admin\\u2069 \\u2066" ;level = "admin"'
trojan = ScriptedModel([Call("run_python", {"code": TROJAN}), "Done."])""",
        "%%agent -m trojan --tools run_python\nSet the level.",
        "print('level:', level, _agent.executed_code == [TROJAN])",
    ],
    "kernel_plot.ipynb": [
        SETUP + '''
PLOT = "import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2])\\nplt.title('drawn by run_python')\\nplotted = True"
plotter = ScriptedModel([Call("run_python", {"code": PLOT}), "Plotted."])''',
        "%%agent -m plotter --tools run_python\nPlot something.",
        "print('plotted' in globals(), _agent.executed_code == [PLOT])",
    ],
    "cost.ipynb": [
        SETUP + "reader = ScriptedModel([Call('read_file', {'path': 'notes.txt'}),"
                " Turn(text='The notes say hello.', delay=3)])",
        "%%agent -m reader --tools read_file --price 300,1200 --max-cost 1\nWhat do the notes say?",
    ],
    "serve.ipynb": [
        "%load_ext agentkernel\nran = []",
        "%agent_serve --tools run_python,list_variables",
        "print(ran, [(c.name, c.status) for c in _agent_serve.calls])",
        "%agent_serve stop",
    ],
    "mcp.ipynb": [
        SETUP + "imager = ScriptedModel([Call('everything__get-tiny-image'), 'Here is the logo.'])",
        "%%agent -m imager --tools read_file --mcp everything\nShow me the logo.",
        "%agent_mcp stop everything",
    ],
}

# The reference MCP server, as tests/support/mcp_servers.py finds it (scripts/test.sh installs it).
EVERYTHING = Path(__file__).parent.parent / "mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

OpenNotebook = Callable[[str], NotebookPage]
JUPYTERLAB = tuple(int(part) for part in re.findall(r"\d+", version("jupyterlab"))[:2])


@pytest.fixture(scope="module", autouse=True)
def notebooks(lab_server: LabServer) -> None:
    for name, cells in NOTEBOOKS.items():
        write_notebook(lab_server.root / name, cells)
    (lab_server.root / "notes.txt").write_text(NOTES)
    # Its annotations not trusted: every call of the server asks.
    (lab_server.root / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING)]}}}))


def test_stop_button_aborts_the_run_within_a_second(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("stop.ipynb")
    latency = flows.stop(nb, "stop")
    MEASUREMENTS.append(f"Stop button: {latency}")
    clicks = ", ".join(f"{c['channel']} channel, subshell_id={c['subshell_id']}" for c in nb.sent_clicks)
    MEASUREMENTS.append(f"Stop click sent by JupyterLab as comm_msg on: {clicks}")
    assert nb.sent_clicks, "the page sent no widget click to the kernel"
    if JUPYTERLAB >= (4, 6):  # sends comms over kernel subshells: this run proved Stop works through one
        assert all(c["subshell_id"] for c in nb.sent_clicks), nb.sent_clicks


def test_tool_call_section_expands_to_arguments_and_output(open_notebook: OpenNotebook) -> None:
    flows.expand_section(open_notebook("calls.ipynb"), "calls")


def test_approve_for_the_run_skips_later_asks_but_not_in_the_next_cell(open_notebook: OpenNotebook) -> None:
    flows.approve_for_run(open_notebook("approve_for_run.ipynb"), "approve-for-run")


def test_deny_with_a_note_reaches_the_model(open_notebook: OpenNotebook) -> None:
    flows.deny_with_note(open_notebook("deny_with_note.ipynb"), "deny-with-note")


def test_repeated_call_guard_ends_the_cell_with_an_error(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("guard.ipynb")
    nb.run_and_wait(0)
    nb.run_and_wait(1)
    nb.shot("guard-1-error", 1)

    expect(nb.status(1)).to_contain_text("repeated_tool_call")
    expect(nb.errors(1)).to_have_count(1)
    expect(nb.errors(1)).to_contain_text(re.compile(r"RepeatedToolCall: REPEATED_TOOL_CALL: read_file"))
    expect(nb.errors(1)).to_contain_text("the partial result is in _agent")
    expect(nb.errors(1)).not_to_contain_text("Traceback")  # no internal stack frames
    # The record replaced the panel: the run appears once, and no widget is left.
    expect(nb.output(1).get_by_text("agent: repeated_tool_call ·")).to_have_count(1)
    flows.expect_run_over(nb, 1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text(re.compile(r"after guard: repeated_tool_call"))


def test_the_panel_shows_the_cost_beside_the_tokens_and_its_budget_bar(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("cost.ipynb")
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.output(1).get_by_text("cost (USD)")).to_be_visible()  # the budget's bar, beside the others
    expect(nb.status(1)).to_contain_text(re.compile(r"running · 2 rounds · 1 tool call · [\d,]+ in · [\d,]+ out · "
                                                    r"\$0\.\d{4}"))  # the first round's cost, live
    nb.shot("cost-1-panel", 1)
    nb.wait_done(1)
    expect(nb.output(1)).to_contain_text("The notes say hello.")
    expect(nb.status(1)).to_contain_text(re.compile(r"complete · 2 rounds · 1 tool call · [\d,]+ in · [\d,]+ out · "
                                                    r"\$0\.\d{4}"))


def test_notebook_interrupt_aborts_cleanly(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("interrupt.ipynb")
    start_slow_run(nb)
    interrupt = nb.toolbar_button("notebook:interrupt-kernel")
    nb.shot("interrupt-1-running", 1)

    nb.arm_timer(1, interrupt, "aborted")
    interrupt.click()
    latency = nb.latency()
    nb.shot("interrupt-2-aborted", 1)
    MEASUREMENTS.append(f"Notebook interrupt (toolbar ■): {latency}")

    assert latency.done < 2.0, f"the cell ended {latency.done:.3f} s after the interrupt"
    expect(nb.status(1)).to_contain_text("aborted")
    expect(nb.errors(1)).to_have_count(1)
    expect(nb.errors(1)).to_contain_text("KeyboardInterrupt")
    nb.run_and_wait(2)  # the kernel is usable, and the run's result was kept
    expect(nb.output(2)).to_have_text(re.compile(r"after interrupt: aborted"))


def test_approve_and_deny_a_side_effecting_tool(open_notebook: OpenNotebook, lab_server: LabServer) -> None:
    nb = open_notebook("approval.ipynb")
    nb.run_and_wait(0)

    nb.run(1)
    expect(nb.button(1, "Approve")).to_be_enabled()
    expect(nb.output(1)).to_contain_text("write_note has side effects. Run it?")
    nb.shot("approval-1-asking", 1)
    nb.button(1, "Approve").click()
    nb.wait_done(1)
    expect(nb.record(1)).to_contain_text("approval: write_note · approved")
    expect(nb.sections(1).locator("summary")).to_have_text('write_note(text="hello") · ok')
    flows.expect_run_over(nb, 1)
    nb.shot("approval-2-approved", 1)

    nb.run(2)
    expect(nb.button(2, "Deny")).to_be_enabled()
    nb.button(2, "Deny").click()
    nb.wait_done(2)
    expect(nb.record(2)).to_contain_text("approval: write_note · denied")
    expect(nb.sections(2).locator("summary")).to_have_text('write_note(text="hello") · denied')
    expect(nb.status(2)).to_contain_text("complete")
    nb.shot("approval-3-denied", 2)

    assert (lab_server.root / "note.txt").read_text() == "hello\n"  # written once: approved, then denied


def test_invisible_characters_are_shown_and_flagged_before_approve(open_notebook: OpenNotebook) -> None:
    """Bidirectional controls in run_python's code would make the panel show a harmless line; they
    are shown as ⟨U+202E⟩ and counted above the code, before Approve."""
    nb = open_notebook("trojan.ipynb")
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.button(1, "Approve")).to_be_enabled()
    expect(nb.output(1)).to_contain_text("this code holds 4 invisible characters, shown as ⟨U+…⟩")
    expect(nb.output(1)).to_contain_text('level = "user⟨U+202E⟩ ⟨U+2066⟩# check if admin⟨U+2069⟩ ⟨U+2066⟩" ;level')
    shown = nb.output(1).inner_text()
    assert not [c for c in shown if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"], shown
    nb.shot("trojan-1-asking", 1)
    nb.button(1, "Approve").click()
    nb.wait_done(1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text(re.compile(r"level: admin True"))  # what ran is the model's code, unchanged


def test_approve_run_python_and_see_its_figure_in_the_section(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("kernel_plot.ipynb")
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.button(1, "Approve")).to_be_enabled()
    expect(nb.output(1)).to_contain_text("run_python has side effects. Run it?")
    expect(nb.output(1)).to_contain_text("plt.plot([1, 3, 2])")  # the code itself, on its own lines
    nb.shot("kernel-plot-1-asking", 1)
    nb.button(1, "Approve").click()
    nb.wait_done(1)
    expect(nb.status(1)).to_contain_text("complete")

    section = nb.sections(1)
    header = section.locator("summary")
    expect(header).to_contain_text(re.compile(r"run_python\(code=.*\) · ok"))
    header.click()
    expect(section).to_contain_text("[image/png ")  # what the model read
    image = section.locator("img")
    expect(image).to_have_count(1)
    expect(image).to_be_visible()
    box = image.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 150, box
    image.scroll_into_view_if_needed()
    nb.shot("kernel-plot-2-figure-in-section")
    expect(nb.output(1).locator("img")).to_have_count(1)  # the figure once, in its call's section
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text(re.compile(r"True True"))


def test_approve_an_mcp_call_and_see_its_image_in_the_section(open_notebook: OpenNotebook) -> None:
    if not EVERYTHING.is_file():
        pytest.fail(f"{EVERYTHING} is not installed: run scripts/test.sh")
    nb = open_notebook("mcp.ipynb")
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.button(1, "Approve")).to_be_enabled(timeout=60_000)  # the server starts first
    expect(nb.output(1)).to_contain_text("everything__get-tiny-image has side effects. Run it?")
    nb.shot("mcp-1-asking", 1)
    nb.button(1, "Approve").click()
    nb.wait_done(1)
    expect(nb.status(1)).to_contain_text("complete")
    section = nb.sections(1)
    header = section.locator("summary")
    expect(header).to_contain_text(re.compile(r"everything__get-tiny-image\(\) · ok"))
    header.click()
    # What the model read beside the image itself (a scripted model takes images).
    expect(section).to_contain_text("[image/png 20x20 from server everything, sent to the model as an image]")
    image = section.locator("img")
    expect(image).to_have_count(1)
    expect(image).to_be_visible()
    nb.shot("mcp-2-image-in-section", 1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_contain_text("MCP server 'everything' stopped")


def test_claude_code_with_the_panels_snippet_asks_in_the_panel_and_gets_deny_with_a_note(
        open_notebook: OpenNotebook, tmp_path: Path) -> None:
    """End to end: Claude Code (on a loopback Anthropic Messages server playing its model), configured with the
    snippet the serving cell's panel shows, calls ``run_python``; the panel asks, the user types a note and clicks
    Deny, and the model's next request carries the denial and the note as the tool's error. Nothing ran."""
    serve_clients.need(NODE, CLAUDE)
    nb = open_notebook("serve.ipynb")
    nb.run_and_wait(0)
    nb.run_and_wait(1)
    expect(nb.status(1)).to_contain_text("serving")
    snippet = nb.output(1).locator("details").filter(has_text="Claude Code").locator("pre").text_content()
    assert snippet and snippet.startswith("claude mcp add --transport http notebook http://127.0.0.1:"), snippet
    with serve_clients.claude_on_a_loopback_model(snippet, tmp_path) as (model, agent):
        box = nb.output(1).get_by_placeholder("Deny with a note")
        expect(box).to_be_enabled(timeout=120_000)
        expect(nb.output(1)).to_contain_text("ran.append('from claude')")  # the code to approve
        nb.shot("serve-1-asking", 1)
        box.fill(flows.NOTE)
        nb.button(1, "Deny").click()
        served, result = serve_clients.finished(model, agent)
    assert "mcp__notebook__run_python" in served
    said = json.dumps(result["content"])
    assert result.get("is_error") is True and f"denied by the user: {flows.NOTE}" in said, said
    expect(nb.status(1)).to_contain_text("1 denied")
    nb.shot("serve-2-denied", 1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text("[] [('run_python', 'denied')]")
    nb.run_and_wait(3)
    expect(nb.output(3)).to_contain_text("the session has ended after 1 call")


def test_background_runs_are_approved_and_stopped_in_their_own_cells_while_other_cells_run(
        open_notebook: OpenNotebook, lab_server: LabServer) -> None:
    nb = open_notebook("background.ipynb")
    flows.background(nb, "lab-background", lab_server.root / "background.ipynb")
    nb.close()
    reopened = open_notebook("background.ipynb")  # the saved records, each in its own cell
    expect(reopened.record(1)).to_contain_text("Approved and ran.")
    expect(reopened.record(2)).to_contain_text("aborted")
    expect(reopened.widget_views(1)).to_have_count(0)
    reopened.shot("lab-background-3-reopened", 1)
