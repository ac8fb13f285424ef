"""What a person does with a ``%%agent`` cell, written once for every front end (JupyterLab and Notebook 7).

Each flow takes a :class:`NotebookPage` on one of :data:`NOTEBOOKS` (the test module writes them into its server's
root) and a prefix for its screenshots in artifacts/browser/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lab import Latency, NotebookPage, wait_saved

expect = pytest.importorskip("playwright.sync_api").expect

SETUP = "%load_ext agentkernel\nfrom agentkernel import Call, ScriptedModel, Turn, tool\n"
NOTES = "hello from notes.txt\n"
NOTE = "use the parquet file instead"
UNDO = "Undo this run"  # the button below a run that changed the notebook or the kernel's variables (src/undo.ts)

NOTEBOOKS = {
    "stop.ipynb": [
        SETUP + "slow = ScriptedModel(lambda req: Turn(text='word ' * 300, delay=0.05))  # 15 s of streaming",
        "%%agent -m slow\nTell me a long story.",
        "from agentkernel import validate_history\n"
        "validate_history(_agent.history)\n"
        "print('after stop:', _agent.status)",
    ],
    "calls.ipynb": [
        SETUP + "reader = ScriptedModel([Call('read_file', {'path': 'notes.txt'}), 'The notes say hello.'])",
        "%%agent -m reader --tools read_file\nWhat do the notes say?",
    ],
    "approve_for_run.ipynb": [
        SETUP + '''
ran = []

def three_steps(request):
    """Three run_python calls, one a round, unless one is denied."""
    outputs = [item["output"] for item in request.history if item["type"] == "function_call_output"]
    if len(outputs) == 3 or any(o.startswith("denied") for o in outputs):
        return "Done."
    return Call("run_python", {"code": f"ran.append({len(outputs)})\\nprint('step', {len(outputs)})"})

steps = ScriptedModel(three_steps)''',
        "%%agent -m steps --tools run_python\nRun the three steps.",
        "print(ran)",
        "%%agent -m steps --tools run_python\nRun the three steps again.",
    ],
    "deny_with_note.ipynb": [
        SETUP + '''
notes = []

@tool(read_only=False)
def write_note(text: str) -> str:
    """Save a note."""
    notes.append(text)
    return "saved"

def note_taker(request):
    outputs = [item["output"] for item in request.history if item["type"] == "function_call_output"]
    return f"The user said: {outputs[0]}" if outputs else Call("write_note", {"text": "read data.csv"})

writer = ScriptedModel(note_taker)''',
        "%%agent -m writer --tools write_note\nSave a note.",
        "print([item['output'] for item in _agent.history if item['type'] == 'function_call_output'], notes)",
    ],
    "background.ipynb": [
        SETUP + "asker = ScriptedModel([Call('run_python', {'code': 'approved = True'}), 'Approved and ran.'])\n"
                "slow = ScriptedModel(lambda req: Turn(text='word ' * 300, delay=0.05))  # 15 s of streaming",
        "%%agent --background -m asker --tools run_python\nRun it.",
        "%%agent --background -m slow\nTell me a long story.",
        "x = 6 * 7\nx",
        "print(approved, _agent.status)",
    ],
}


def start_slow_run(nb: NotebookPage) -> None:
    """Run the setup cell and the slow ``%%agent`` cell; return once its panel streams text."""
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.stop_button(1)).to_be_enabled()
    expect(nb.status(1)).to_contain_text("running · 1 round")
    expect(nb.output(1)).to_contain_text("word word word")


def expect_run_over(nb: NotebookPage, index: int) -> None:
    """The ended run left its record in place of the panel: no widget, no Stop button, no approval buttons; the one
    button left is the Undo of a run that changed the notebook or the kernel's variables."""
    expect(nb.record(index)).to_have_count(1)
    expect(nb.widget_views(index)).to_have_count(0)
    expect(nb.output(index).get_by_role("button").filter(has_not_text=UNDO)).to_have_count(0)


def stop(nb: NotebookPage, prefix: str) -> Latency:
    """stop.ipynb: Stop ends the streaming run at once, is not an error, and the queued next cell runs."""
    start_slow_run(nb)
    nb.run(2)  # queued behind the agent cell: it must run once Stop ends the run
    nb.shot(f"{prefix}-1-running", 1)
    nb.arm_timer(1, nb.stop_button(1), "aborted")
    nb.stop_button(1).click()
    latency = nb.latency()
    nb.wait_done(2)
    nb.shot(f"{prefix}-2-aborted", 1)
    assert latency.done < 1.0, f"the cell ended {latency.done:.3f} s after the click"
    expect(nb.status(1)).to_contain_text("aborted")
    expect_run_over(nb, 1)
    expect(nb.errors(1)).to_have_count(0)  # Stop is not an error
    expect(nb.output(2)).to_have_text(re.compile(r"after stop: aborted"))  # history valid, next cell ran
    return latency


def expand_section(nb: NotebookPage, prefix: str) -> None:
    """calls.ipynb: the finished run's record has a tool call's section, collapsed, that expands to its arguments
    and output."""
    nb.run_and_wait(0)
    nb.run_and_wait(1)
    expect(nb.status(1)).to_contain_text("complete")
    expect(nb.output(1)).to_contain_text("The notes say hello.")
    expect_run_over(nb, 1)
    section = nb.sections(1)
    header = section.locator("summary")
    contents = section.locator("pre")
    expect(section).to_have_count(1)
    expect(header).to_have_text('read_file(path="notes.txt") · ok')
    expect(contents.first).to_be_hidden()  # collapsed by default
    nb.shot(f"{prefix}-1-collapsed", 1)
    header.click()
    expect(contents.first).to_be_visible()
    expect(section).to_contain_text('"path": "notes.txt"')
    expect(section).to_contain_text(NOTES.strip())
    nb.shot(f"{prefix}-2-expanded", 1)


def approve_for_run(nb: NotebookPage, prefix: str) -> None:
    """approve_for_run.ipynb: "Approve run_python for this run" answers the run's later asks, not the next cell's."""
    nb.run_and_wait(0)
    nb.run(1)
    for_run = nb.button(1, "Approve run_python for this run")
    expect(for_run).to_be_enabled()
    expect(nb.output(1)).to_contain_text("code · 2 lines")  # the code to approve, highlighted, with its length
    expect(nb.output(1)).to_contain_text("ran.append(0)")
    # While the question waits, the status line says so, and for how long.
    expect(nb.status(1)).to_contain_text(re.compile(r"^waiting for approval \(\d+ s\) · 1 round"))
    expect(nb.output(1)).to_contain_text("waiting for approval: run_python has side effects. Run it?")
    nb.shot(f"{prefix}-1-asking", 1)
    for_run.click()
    nb.wait_done(1)
    expect(nb.status(1)).to_contain_text("complete")
    expect(nb.record(1)).to_contain_text("approval: run_python · approved for the rest of this run")
    expect(nb.sections(1).locator("summary")).to_have_text(
        [re.compile(r"run_python\(code=.*\) · ok")] * 3)  # three calls ran
    expect(nb.record(1).get_by_text("approval: run_python")).to_have_count(1)  # after one question
    expect_run_over(nb, 1)
    # its run_python appended to ran: the run offers to take that back (not run here)
    expect(nb.output(1).get_by_role("button", name=UNDO)).to_be_enabled()
    expect(nb.output(1).locator(".jp-agentkernel-undo-line")).to_contain_text("changed 0 cells and 1 variable")
    nb.shot(f"{prefix}-2-approved-for-the-run", 1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text("[0, 1, 2]")

    nb.run(3)  # the next cell asks again
    expect(nb.button(3, "Approve")).to_be_enabled()
    nb.shot(f"{prefix}-3-next-cell-asks-again", 3)
    nb.button(3, "Deny").click()
    nb.wait_done(3)
    expect(nb.record(3)).to_contain_text("approval: run_python · denied")
    expect(nb.status(3)).to_contain_text("complete")
    expect_run_over(nb, 3)
    expect(nb.output(3).get_by_role("button", name=UNDO)).to_have_count(0)  # the denied run changed nothing


def deny_with_note(nb: NotebookPage, prefix: str) -> None:
    """deny_with_note.ipynb: the note typed beside Deny is the call's output the model reads; the run goes on."""
    nb.run_and_wait(0)
    nb.run(1)
    box = nb.output(1).get_by_placeholder("Deny with a note")
    expect(box).to_be_enabled()
    box.fill(NOTE)
    nb.shot(f"{prefix}-1-typed", 1)
    nb.button(1, "Deny").click()
    nb.wait_done(1)
    expect(nb.status(1)).to_contain_text("complete")
    expect(nb.record(1)).to_contain_text("approval: write_note · denied with a note")
    expect(nb.record(1)).to_contain_text(f"The user said: denied by the user: {NOTE}")  # the model's answer
    expect_run_over(nb, 1)
    nb.shot(f"{prefix}-2-denied", 1)
    nb.run_and_wait(2)
    expect(nb.output(2)).to_have_text(f"['denied by the user: {NOTE}'] []")  # in _agent.history; nothing saved


def background(nb: NotebookPage, prefix: str, saved_as: Path) -> None:
    """background.ipynb: two background runs whose cells end at once; other cells run meanwhile; one is approved in
    its panel while it runs in the background, the other stopped; saved and reopened, each record is in its own
    cell and no other cell holds anything of theirs."""
    nb.run_and_wait(0)
    nb.run_and_wait(1)  # ends at once: the run waits for its approval in the background
    nb.run_and_wait(2)
    expect(nb.output(1)).to_contain_text("run 1 goes on in the background")
    expect(nb.stop_button(2)).to_be_enabled()
    expect(nb.output(2)).to_contain_text("word word word")  # it streams after its cell ended
    nb.run_and_wait(3)  # the user's own cell, while both run
    expect(nb.output(3)).to_have_text(re.compile(r"^(\[\d+\]:)?\s*42$"))
    nb.shot(f"{prefix}-1-both-running", 1)
    approve = nb.button(1, "Approve")
    expect(approve).to_be_enabled()
    approve.click()
    expect(nb.record(1)).to_contain_text("Approved and ran.")
    nb.stop_button(2).click()
    expect(nb.status(2)).to_contain_text("aborted")
    expect_run_over(nb, 1)
    expect_run_over(nb, 2)
    nb.run_and_wait(4)
    expect(nb.output(4)).to_have_text("True aborted")
    expect(nb.output(3)).to_have_text(re.compile(r"^(\[\d+\]:)?\s*42$"))  # nothing of the runs landed there
    nb.shot(f"{prefix}-2-both-ended", 1)
    nb.page.keyboard.press("Escape")
    nb.page.keyboard.press("Control+s")
    saved = wait_saved(saved_as, lambda s: any("text/html" in o.get("data", {}) for o in s.cells[2].outputs))
    for index, words in ((1, "Approved and ran."), (2, "aborted")):
        outputs = saved.cells[index].outputs
        records = [o for o in outputs if "text/html" in o.get("data", {})]
        assert len(records) == 1 and words in records[0]["data"]["text/html"], outputs
        assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), outputs
    assert [o.get("data", {}).get("text/plain") for o in saved.cells[3].outputs] == ["42"]
