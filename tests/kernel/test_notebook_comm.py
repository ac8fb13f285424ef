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
from collections.abc import Callable
from typing import Any

from kernel_client import Cell, KernelSession, kernel_fixtures

from agentkernel.jupyter.kernel.notebook import COMM_TARGET, HELLO_TIMEOUT

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


def code_cell(cell_id: str, source: str, count: int | None = None, error: bool = False, out: str = "") -> dict:
    return {"id": cell_id, "cell_type": "code", "source": source, "execution_count": count, "has_error": error,
            "outputs_text": out, "metadata_agentkernel": None}


class FakeNotebook:
    """agentkernel's front-end extension, played by the test: it answers the kernel's requests from ``cells``."""

    def __init__(self, kernel: KernelSession, cells: list[dict[str, Any]], *, close: bool = False):
        self.kernel = kernel
        self.cells = cells
        self.close = close  # answer the comm_open with comm_close, as JupyterLab without the extension does
        self.requests: list[dict[str, Any]] = []
        self.comms: set[str] = set()
        self.handled: set[str] = set()
        self.after_read: Callable[[], None] | None = None  # what the user does once the model has read
        self.made = 0
        self.active = "agent"  # the user's active cell
        self.panel = True  # False: the extension finds no notebook panel for this kernel

    def submit(self, code: str, cell_id: str = "agent") -> Cell:
        """Send the agent's cell as JupyterLab does: an execute_request with ``metadata.cellId``."""
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True}
        msg = self.kernel.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
        self.kernel.kc.shell_channel.send(msg)
        return Cell(self.kernel, msg["header"]["msg_id"], code)

    def serve_until(self, cell: Cell, done: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out\n{cell.describe()}"
            self.kernel.pump(0.02)
            self.serve(cell)

    def run(self, cell: Cell, timeout: float = 30) -> Cell:
        self.serve_until(cell, lambda: cell.done, timeout)
        assert cell.status == "ok" and not cell.errors, cell.describe()
        return cell

    def serve(self, cell: Cell) -> None:
        for msg in cell.messages:
            content = msg["content"]
            if msg["header"]["msg_id"] in self.handled:
                continue
            if msg["msg_type"] == "comm_open" and content.get("target_name") == COMM_TARGET:
                self.comms.add(content["comm_id"])
                if self.close:
                    self.send("comm_close", {"comm_id": content["comm_id"], "data": {}})
                    continue
            elif not (msg["msg_type"] == "comm_msg" and content["comm_id"] in self.comms):
                continue
            self.handled.add(msg["header"]["msg_id"])
            request = content["data"]
            self.requests.append(request)
            reply = {"request_id": request["request_id"], **self.answer(request)}
            self.send("comm_msg", {"comm_id": content["comm_id"], "data": reply})
            if request["op"] == "read" and self.after_read is not None:
                after, self.after_read = self.after_read, None
                after()  # (which may set the next one)

    def send(self, msg_type: str, content: dict[str, Any]) -> None:
        self.kernel.kc.shell_channel.send(self.kernel.kc.session.msg(msg_type, content))

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if not self.panel:
            return {"ok": False, "reason": "error", "error": "no notebook panel has this kernel"}
        if op == "hello":
            return {"ok": True, "front_end": "jupyterlab", "version": "0.1.0", "can_edit": True}
        if op == "read":
            return {"ok": True, "path": "study.ipynb", "active_cell_id": self.active, "cells": self.cells}
        ids = [c["id"] for c in self.cells]
        wanted = request["after"] if op == "insert" else request["cell_id"]
        if wanted not in ids:
            return {"ok": False, "reason": "missing", "error": f"no cell with id {wanted!r}"}
        if op == "insert":
            self.made += 1
            cell = {**code_cell(f"new-{self.made}", request["source"]), "cell_type": request["cell_type"],
                    "metadata": request["metadata"]}
            index = ids.index(wanted) + 1
            self.cells.insert(index, cell)
            return {"ok": True, "cell_id": cell["id"], "index": index}
        cell = self.cells[ids.index(wanted)]
        if cell["source"] != request["expected_source"]:
            return {"ok": False, "reason": "changed", "error": "the cell changed since it was read",
                    "source": cell["source"]}
        old, cell["source"], cell["metadata"] = cell["source"], request["source"], request["metadata"]
        return {"ok": True, "old_source": old}

    def cell(self, cell_id: str) -> dict[str, Any]:
        return next(c for c in self.cells if c["id"] == cell_id)

    @property
    def ops(self) -> list[str]:
        return [r["op"] for r in self.requests]


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
    assert notebook.ops == ["hello", "read", "read"]  # the run's start reads the cells tagged agent-instructions


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

    notebook.after_read = lambda: setattr(notebook, "after_read", users_fix)  # the first read: the tagged cells
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
    assert notebook.ops == ["hello", "read", "read"]  # no replace was sent (the first read: the tagged cells)


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
