"""What a person does with a ``%%agent`` cell, written once for every front end (JupyterLab and Notebook 7).

Each flow takes a :class:`NotebookPage` on one of :data:`NOTEBOOKS` (the test module writes them into its server's
root) and a prefix for its screenshots in artifacts/browser/.
"""

from __future__ import annotations

import re

import pytest
from lab import Latency, NotebookPage

expect = pytest.importorskip("playwright.sync_api").expect

SETUP = "%load_ext agentkernel\nfrom agentkernel import Call, ScriptedModel, Turn, tool\n"
NOTES = "hello from notes.txt\n"
NOTE = "use the parquet file instead"

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
}


def start_slow_run(nb: NotebookPage) -> None:
    """Run the setup cell and the slow ``%%agent`` cell; return once its panel streams text."""
    nb.run_and_wait(0)
    nb.run(1)
    expect(nb.stop_button(1)).to_be_enabled()
    expect(nb.status(1)).to_contain_text("running · 1 round")
    expect(nb.output(1)).to_contain_text("word word word")


def expect_run_over(nb: NotebookPage, index: int) -> None:
    """The ended run left its record in place of the panel: no widget, no Stop button, no approval buttons."""
    expect(nb.record(index)).to_have_count(1)
    expect(nb.widget_views(index)).to_have_count(0)
    expect(nb.output(index).get_by_role("button")).to_have_count(0)


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
