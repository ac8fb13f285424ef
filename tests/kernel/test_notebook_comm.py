"""The notebook tools over the ``agentkernel.notebook`` comm, in a real kernel, with the front end played in Python
on the client side: it sees the kernel's comm_open and comm_msg requests on iopub and answers each with a comm_msg
on the shell channel, as agentkernel's JupyterLab extension does (src/index.ts), holding the notebook as a list of
cells. The execute requests carry ``metadata.cellId`` as JupyterLab sends it.

Covered: read (a markdown cell above the agent's cell is in the tool output, the agent's cell marked), insert (below
the agent's cell, in the order written, with ``metadata.agentkernel``), replace (what changed; refused when the
user changed the cell after the read, or the model never read it), Deny with a note (the note reaches the model,
nothing is written), ``--cells`` as real cells, and a front end that closes the comm (no extension there).
"""

from __future__ import annotations

import html
import re
import time
from typing import Any

from fake_notebook import FakeNotebook, code_cell
from kernel_client import KernelSession, kernel_fixtures

from agentkernel.jupyter.kernel.notebook import HELLO_TIMEOUT

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE"):
    os.environ.pop(_name, None)
get_ipython()._agentkernel_notebook = None
from agentkernel import Call, ScriptedModel


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]


def call_ids(name):
    return [item["call_id"] for item in _agent.history if item.get("name") == name]
"""

session, kernel = kernel_fixtures("notebook_comm", SETUP)


def study(agent_code: str) -> list[dict[str, Any]]:
    return [
        {"id": "intro", "cell_type": "markdown", "source": "# Rain study\nWhich city is **wettest**?",
         "execution_count": None, "has_error": False, "outputs_text": "", "metadata_agentkernel": None},
        code_cell("load", "rain = {'Oslo': 3, 'Lima': 0}", 1),
        code_cell("broken", "rain['Pune']", 2, error=True, out="KeyError: 'Pune'\n"),
        code_cell("agent", agent_code),
        code_cell("later", "# not run yet"),
    ]


def agent_cell(kernel: KernelSession, calls: list[tuple[str, dict]], options: str = "--allow-writes") -> str:
    script = ", ".join(f"Call({name!r}, {arguments!r})" for name, arguments in calls)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    return f"%%agent -m m {options}\ngo"


def test_read_shows_every_cell_in_order_and_marks_the_agent_cell(kernel: KernelSession):
    code = agent_cell(kernel, [("read_notebook", {})])
    notebook = FakeNotebook(kernel, study(code))
    notebook.active = "load"
    notebook.run(notebook.submit(code))
    (text,) = kernel.value("outputs()")
    head, *cells = text.split("\n--- ")
    assert cells[1] == "cell 1 · code · id load · In [1] · the user's active cell\nrain = {'Oslo': 3, 'Lima': 0}"
    assert head == "notebook study.ipynb, live in JupyterLab (unsaved edits included) · 5 cells"
    assert cells[0] == "cell 0 · markdown · id intro\n# Rain study\nWhich city is **wettest**?"  # the cell above
    assert cells[2] == ("cell 2 · code · id broken · In [2] · its outputs hold an error\nrain['Pune']\n"
                        "··· outputs:\nKeyError: 'Pune'")
    assert cells[3] == f"cell 3 · code · id agent · THIS CELL: the %%agent cell running now\n{code}"
    assert cells[4] == "cell 4 · code · id later\n# not run yet"
    assert notebook.ops == ["hello", "read"]


def test_add_cell_inserts_below_the_agent_cell_in_the_order_written_with_metadata(kernel: KernelSession):
    code = agent_cell(kernel, [("add_cell", {"source": "## Findings\nOslo is wettest.", "cell_type": "markdown"}),
                               ("add_cell", {"source": "max(rain, key=rain.get)"}),
                               ("add_cell", {"source": "Data from 2024.", "cell_type": "markdown", "after": "intro"}),
                               ("add_cell", {"source": "x", "after": "ghost"})])
    notebook = FakeNotebook(kernel, study(code))
    cell = notebook.run(notebook.submit(code))
    assert [c["id"] for c in notebook.cells] == ["intro", "new-3", "load", "broken", "agent", "new-1", "new-2", "later"]
    assert [notebook.cell(i)["cell_type"] for i in ("new-1", "new-2", "new-3")] == ["markdown", "code", "markdown"]
    run_id, calls = kernel.value("_agent.run_id"), kernel.value("call_ids('add_cell')")
    assert [notebook.cell(i)["metadata"] for i in ("new-1", "new-2", "new-3")] == [
        {"agentkernel": {"run_id": run_id, "tool_call_id": call_id}} for call_id in calls[:3]]
    first, second, third, ghost = kernel.value("outputs()")
    assert first.startswith("added a markdown cell, id new-1, at index 4 (below cell agent). It has not run")
    assert second.startswith("added a code cell, id new-2, at index 5 (below cell new-1)")
    assert third.startswith("added a markdown cell, id new-3, at index 1 (below cell intro)")
    assert ghost == "error: CellNotWritten: not added: no cell with id 'ghost'"
    assert not cell.reply["content"]["payload"]  # nothing queued: the cells are in the notebook


def test_edit_cell_writes_a_read_cell_and_refuses_one_changed_since_or_never_read(kernel: KernelSession):
    code = agent_cell(kernel, [("read_notebook", {}),
                               ("edit_cell", {"cell_id": "load", "source": "rain = {'Oslo': 3, 'Lima': 1}"}),
                               ("edit_cell", {"cell_id": "broken", "source": "rain.get('Pune')"}),
                               ("edit_cell", {"cell_id": "ghost", "source": "x"})])
    notebook = FakeNotebook(kernel, study(code))
    def users_fix() -> None:
        notebook.cell("broken").update(source="rain['Pune'] = 7  # the user's fix")

    notebook.after_read = users_fix
    notebook.run(notebook.submit(code))
    _, edited, changed, never = kernel.value("outputs()")
    assert edited == ("edited cell load (one undo in its editor restores it); it has not run. The change:\n"
                      "--- before\n+++ after\n@@ -1 +1 @@\n"
                      "-rain = {'Oslo': 3, 'Lima': 0}\n+rain = {'Oslo': 3, 'Lima': 1}")
    assert notebook.cell("load")["source"] == "rain = {'Oslo': 3, 'Lima': 1}"
    assert notebook.cell("load")["metadata"]["agentkernel"]["tool_call_id"] == kernel.value("call_ids('edit_cell')")[0]
    assert changed == ("error: CellNotWritten: not edited: cell broken changed since it was read (the user edited "
                       "it), so nothing was written. Its source now:\nrain['Pune'] = 7  # the user's fix")
    assert notebook.cell("broken")["source"] == "rain['Pune'] = 7  # the user's fix"
    assert never.startswith("error: CellNotWritten: not edited: cell ghost was not read in this run")
    replaces = [r for r in notebook.requests if r["op"] == "replace"]
    assert [(r["cell_id"], r["expected_source"]) for r in replaces] == [
        ("load", "rain = {'Oslo': 3, 'Lima': 0}"), ("broken", "rain['Pune']")]  # what the model had read


def test_deny_an_edit_with_a_note_writes_nothing_and_the_note_reaches_the_model(kernel: KernelSession):
    code = agent_cell(kernel, [("read_notebook", {}), ("edit_cell", {"cell_id": "load", "source": "rain = {}"})],
                      options="")
    notebook = FakeNotebook(kernel, study(code))
    cell = notebook.submit(code)
    buttons: dict[str, str] = {}

    def asked() -> bool:
        for msg in cell.of_type("comm_open"):
            state = msg["content"].get("data", {}).get("state", {})
            if state.get("_model_name") in ("ButtonModel", "TextModel"):
                buttons.setdefault(state.get("description") or state["_model_name"], msg["content"]["comm_id"])
        return "Deny" in buttons and "TextModel" in buttons and bool(diffs())

    def diffs() -> list[str]:  # the approval shows the change as a diff
        states = [m["content"].get("data", {}).get("state", {}) for m in cell.of_type("comm_open")]
        return [s["value"] for s in states if "before → after" in str(s.get("value"))]

    notebook.serve_until(cell, asked)
    (diff,) = diffs()
    text = html.unescape(re.sub(r"<[^>]+>", "", diff))
    assert "-rain = {'Oslo': 3, 'Lima': 0}\n+rain = {}" in text
    kernel.set_state(buttons["TextModel"], value="keep the loading cell as it is")
    kernel.click(buttons["Deny"])
    notebook.run(cell)
    assert kernel.value("outputs()")[1] == "denied by the user: keep the loading cell as it is"
    assert notebook.cell("load")["source"] == "rain = {'Oslo': 3, 'Lima': 0}"
    assert "metadata" not in notebook.cell("load")
    assert notebook.ops == ["hello", "read"]  # no replace was sent


def test_cells_option_puts_each_executed_snippet_in_a_real_cell(kernel: KernelSession):
    code = agent_cell(kernel, [("run_python", {"code": "a_var = 1"}), ("run_python", {"code": "b_var = a_var + 1\n"})],
                      options="--allow-writes --cells")
    notebook = FakeNotebook(kernel, study(code))
    cell = notebook.run(notebook.submit(code))
    assert [c["id"] for c in notebook.cells] == ["intro", "load", "broken", "agent", "new-1", "new-2", "later"]
    assert [notebook.cell(i)["source"] for i in ("new-1", "new-2")] == ["a_var = 1", "b_var = a_var + 1"]
    calls = kernel.value("call_ids('run_python')")
    assert [notebook.cell(i)["metadata"]["agentkernel"]["tool_call_id"] for i in ("new-1", "new-2")] == calls
    assert not cell.reply["content"]["payload"]


def test_a_front_end_that_closes_the_comm_is_known_at_once(kernel: KernelSession):
    code = agent_cell(kernel, [("add_cell", {"source": "x = 1"})])
    notebook = FakeNotebook(kernel, study(code), close=True)
    started = time.monotonic()
    cell = notebook.run(notebook.submit(code))
    assert time.monotonic() - started < HELLO_TIMEOUT  # no waiting for the hello's timeout
    (text,) = kernel.value("outputs()")
    assert text.startswith("[no notebook extension answers here (the front end closed the notebook comm")
    assert [p["text"] for p in cell.reply["content"]["payload"]] == ["x = 1"]


def test_an_extension_without_the_notebook_panel_is_no_front_end(kernel: KernelSession):
    code = agent_cell(kernel, [("read_notebook", {})])
    notebook = FakeNotebook(kernel, study(code))
    notebook.panel = False
    started = time.monotonic()
    notebook.run(notebook.submit(code))
    assert time.monotonic() - started < HELLO_TIMEOUT
    (text,) = kernel.value("outputs()")
    assert text.startswith("[no notebook extension answers here (the front end answered: no notebook panel has "
                           "this kernel)")
    assert "no notebook is known" in text and notebook.ops == ["hello"]


def test_a_failed_hello_is_tried_again_in_the_next_run(kernel: KernelSession):
    """A hello the front end answered with an error, or with a reply that is not agentkernel's,
    disabled the notebook tools for that front end until the page was reloaded (the same client session)."""
    code = agent_cell(kernel, [("read_notebook", {})])
    notebook = FakeNotebook(kernel, study(code))
    notebook.panel = False  # the extension found no panel for this kernel yet (the notebook was still opening)
    notebook.run(notebook.submit(code))
    assert kernel.value("outputs()")[0].startswith("[no notebook extension answers here")
    notebook.panel = True
    code = agent_cell(kernel, [("read_notebook", {})])
    notebook.run(notebook.submit(code))
    assert kernel.value("outputs()")[0].startswith("notebook study.ipynb, live in JupyterLab")
    assert notebook.ops[:2] == ["hello", "hello"] and "read" in notebook.ops


JUNK = 2000


def test_junk_replies_cost_no_more_than_reading_them(kernel: KernelSession):
    """Counted in work, not time: 2,000 replies nobody asked for, sent while the run waits for its
    read and after the run closed the comm, schedule nothing on the kernel's event loop and write nothing to the
    cell's stderr (each made the comm package log "No such comm" through ipykernel's IO thread: about a minute on a
    loaded machine)."""
    kernel.ok("from agentkernel.jupyter.kernel import notebook as _nb\n"
              "_settled = []\n"
              "_settle = _nb.NotebookBridge._settle\n"
              "_nb.NotebookBridge._settle = lambda self, reply: (_settled.append(reply), _settle(self, reply))[1]\n"
              "_dropped = _nb.LATE_REPLIES.dropped")
    code = agent_cell(kernel, [("read_notebook", {}), ("read_notebook", {"start": 1})])
    notebook = FakeNotebook(kernel, study(code))
    junk = [{"request_id": f"junk-{i}", "ok": True, "cells": []} for i in range(JUNK // 2)] + \
        [{"request_id": [[[i]]], "ok": "yes"} for i in range(JUNK // 2)]

    def send_junk() -> None:
        for data in junk:
            notebook.send("comm_msg", {"comm_id": comm_id, "data": data})

    comm_id = ""

    def after_read() -> None:  # the model has read; the run goes on with the junk arriving
        nonlocal comm_id
        comm_id = next(iter(notebook.comms))
        send_junk()

    notebook.after_read = after_read
    notebook.run(notebook.submit(code))
    assert kernel.value("len(outputs())") == 2
    send_junk()  # the run closed the comm: to a comm the kernel no longer has
    kernel.ok("import time; time.sleep(0.01)")  # queued behind the junk: the kernel has read it all
    assert kernel.value("len(_settled)") == len(notebook.requests) >= 3  # hello and the reads: the real replies
    assert kernel.value("_nb.LATE_REPLIES.dropped - _dropped") >= JUNK  # each warning dropped, unwritten
    streams = [m for messages in kernel.iopub.values() for _, m in messages if m["msg_type"] == "stream"]
    assert not [m for m in streams if "No such comm" in m["content"]["text"]]
