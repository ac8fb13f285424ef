"""Approvals in a real kernel, clicked and typed into through comm messages as a front end sends them.

Approve for the rest of the run (asked once per tool and run, asked again in the next cell), Deny with a note (the
note is the call's output the model reads, and the run goes on), Stop while an approval waits (denied at once), and
what is left disabled when the run ends.
"""

from __future__ import annotations

import json

from kernel_client import KernelSession, Message, button_description, kernel_fixtures
from timing import STOP_BOUND

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os, agentkernel
os.environ.pop("CI", None)
from agentkernel import Call, ScriptedModel, tool

ran, notes, seen_outputs = [], [], []

@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    notes.append(text)
    return "written"

def _thrice(req):
    "Three run_python calls, one per round, unless one is denied."
    outputs = [item["output"] for item in req.history if item["type"] == "function_call_output"]
    seen_outputs[:] = outputs
    if len(outputs) == 3 or any(o.startswith("denied") for o in outputs):
        return "done"
    return Call("run_python", {"code": f"ran.append({len(outputs)})\\nprint('ran', {len(outputs)})"})

def _writer(req):
    outputs = [item["output"] for item in req.history if item["type"] == "function_call_output"]
    seen_outputs[:] = outputs
    return "noted" if outputs else Call("write_note", {"text": "hi"})

thrice, writer = ScriptedModel(_thrice), ScriptedModel(_writer)
"""


session, kernel = kernel_fixtures("approval_kernel", SETUP)


def shown(cell, text: str) -> bool:
    """Whether some widget message of the cell carries ``text``."""
    return any(text in json.dumps(m["content"].get("data", {}), ensure_ascii=False)
               for m in cell.of_type("comm_open", "comm_msg"))


def asks(cell) -> list[Message]:
    return [m for m in cell.messages if button_description(m) == "Approve"]


def test_approve_for_the_run_skips_later_asks_in_that_run_but_not_in_the_next_cell(kernel: KernelSession):
    cell = kernel.submit("%%agent -m thrice --tools run_python\nrun three steps")
    for_run = cell.wait_for_button("Approve run_python for this run")
    cell.wait_for(lambda m: "code · 2 lines" in json.dumps(m["content"], ensure_ascii=False))  # with the code
    kernel.click(for_run)
    cell.wait(15)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("ran") == [0, 1, 2]  # three calls ran
    assert len(asks(cell)) == 1  # after one question
    assert shown(cell, "approved for the rest of this run")
    assert cell.states(for_run)["disabled"] is True
    approve = asks(cell)[0]["content"]["comm_id"]
    assert cell.states(approve)["disabled"] is True and cell.states(approve)["button_style"] == ""

    again = kernel.submit("%%agent -m thrice --tools run_python\nrun three steps")
    deny = again.wait_for_button("Deny")
    kernel.settle(0.3)
    assert not again.done  # the next cell asks again
    kernel.click(deny)
    again.wait(15)
    assert again.status == "ok" and not again.errors, again.describe()
    assert kernel.value("ran") == [0, 1, 2]
    assert kernel.value("seen_outputs") == ["denied: run_python has side effects and the user denied it"]


def test_deny_with_a_note_sends_the_note_to_the_model_and_the_run_goes_on(kernel: KernelSession):
    cell = kernel.submit("%%agent -m writer --tools write_note\nwrite hi")
    note = cell.wait_for_widget("TextModel")
    deny = cell.wait_for_button("Deny")
    kernel.set_state(note, value="use the parquet file instead")  # what typing into the box sends
    kernel.click(deny)
    cell.wait(10)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("notes") == []
    assert kernel.value("seen_outputs") == ["denied by the user: use the parquet file instead"]
    assert kernel.value("[i['output'] for i in _agent.history if i['type'] == 'function_call_output']") == [
        "denied by the user: use the parquet file instead"]
    assert kernel.value("(_agent.status, _agent.answer)") == ["complete", "noted"]
    assert shown(cell, "denied with a note")
    assert cell.states(note)["disabled"] is True and cell.states(deny)["disabled"] is True


def test_stop_while_an_approval_waits_denies_it_at_once_and_disables_the_panel(kernel: KernelSession):
    cell = kernel.submit("%%agent -m writer --tools write_note\nwrite hi")
    stop = cell.wait_for_button("Stop")
    approve = cell.wait_for_button("Approve")
    kernel.settle(0.2)
    clicked = kernel.click(stop)
    cell.wait(10)
    assert cell.idle_at - clicked < STOP_BOUND
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "aborted" and kernel.value("notes") == []
    assert shown(cell, "denied: the run was stopped")
    assert cell.states(approve)["disabled"] is True
    assert cell.states(stop)["disabled"] is True and cell.states(stop)["button_style"] == ""  # grey, not red
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"
