"""Markers round-trip, never overwrite: the model reads a cell holding a secret as ``[secret $NAME]``;
the tools that write (``edit_cell``, ``add_cell``, ``run_python``) give the value back where a marker stands
exactly where the cell held it, and refuse a marker anywhere else, saying what to use. The approval shows markers on
both sides of the diff, never the value. In a real kernel, the front end played by the test (as in
``test_notebook_comm.py``).
"""

from __future__ import annotations

import html
import json
import re

from kernel_client import KernelSession, kernel_fixtures
from secret_pieces import leaks
from test_notebook_comm import FakeNotebook, agent_cell, code_cell

from agentkernel.jupyter.kernel.notebook import COMM_TARGET

TOKEN = "ghp_MarkerTestTokenValue0123456789abcdefXYZ"
CELL = f'import os\nAPI = "{TOKEN}"\nprint(len(API))\n'
REFUSAL = 'the notebook cannot hold a marker; use os.environ["GITHUB_TOKEN"]'

SETUP = f"""\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE"):
    os.environ.pop(_name, None)
os.environ["GITHUB_TOKEN"] = {TOKEN!r}
get_ipython()._agentkernel_notebook = None
from agentkernel import Call, ScriptedModel


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]
"""

session, kernel = kernel_fixtures("secret_markers", SETUP)


def cells(code: str) -> list[dict]:
    return [code_cell("creds", CELL, 1), code_cell("agent", code)]


def shown(messages: list[dict]) -> str:
    """The iopub messages of a run but those of the notebook comm, which writes the cell with its value (the
    notebook's own text, to the notebook)."""
    notebook = {m["content"]["comm_id"] for m in messages
                if m["msg_type"] == "comm_open" and m["content"].get("target_name") == COMM_TARGET}
    return json.dumps([m["content"] for m in messages if m["content"].get("comm_id") not in notebook])


def test_an_approved_edit_keeps_the_value_and_the_approval_shows_markers_only(kernel: KernelSession):
    edited = 'import os\nAPI = "[secret $GITHUB_TOKEN]"\nprint(len(API), "characters")\n'
    code = agent_cell(kernel, [("read_notebook", {}), ("edit_cell", {"cell_id": "creds", "source": edited})],
                      options="")
    notebook = FakeNotebook(kernel, cells(code))
    cell = notebook.submit(code)
    buttons: dict[str, str] = {}

    def diffs() -> list[str]:
        states = [m["content"].get("data", {}).get("state", {}) for m in cell.of_type("comm_open")]
        return [s["value"] for s in states if "before → after" in str(s.get("value"))]

    def asked() -> bool:
        for msg in cell.of_type("comm_open"):
            state = msg["content"].get("data", {}).get("state", {})
            if state.get("_model_name") == "ButtonModel":
                buttons.setdefault(state.get("description"), msg["content"]["comm_id"])
        return "Approve" in buttons and bool(diffs())

    notebook.serve_until(cell, asked)
    (diff,) = diffs()
    text = html.unescape(re.sub(r"<[^>]+>", "", diff))
    assert '-print(len(API))\n+print(len(API), "characters")' in text
    assert text.count('API = "[secret $GITHUB_TOKEN]"') == 1  # an unchanged line, markers both sides
    assert TOKEN not in text and not leaks({"GITHUB_TOKEN": TOKEN}, [shown(cell.messages)])
    kernel.click(buttons["Approve"])
    notebook.run(cell)
    # The saved cell holds the real value where the marker stood, and the change; nothing was lost.
    assert notebook.cell("creds")["source"] == CELL.replace("print(len(API))", 'print(len(API), "characters")')
    read, change = kernel.value("outputs()")
    assert 'API = "[secret $GITHUB_TOKEN]"' in read and change.startswith("edited cell creds")
    for where, text in (("iopub", shown(cell.messages)), ("outputs", read + change),
                        ("_agent", kernel.value("repr(vars(_agent))"))):
        found = leaks({"GITHUB_TOKEN": TOKEN}, [text])
        assert not found, (where, found, text[text.find(found.get("GITHUB_TOKEN", "")) - 300:][:800])


def test_a_misplaced_marker_is_refused_unasked_and_nothing_is_written(kernel: KernelSession):
    copied = CELL.replace(TOKEN, "[secret $GITHUB_TOKEN]") + 'headers = {"token": "[secret $GITHUB_TOKEN]"}\n'
    code = agent_cell(kernel, [("read_notebook", {}), ("edit_cell", {"cell_id": "creds", "source": copied})],
                      options="")
    notebook = FakeNotebook(kernel, cells(code))
    cell = notebook.run(notebook.submit(code))
    assert not [m for m in cell.of_type("comm_open")
                if m["content"].get("data", {}).get("state", {}).get("description") == "Approve"]  # not asked
    refused = kernel.value("outputs()")[1]
    assert refused.startswith("error: CellNotWritten: not edited: [secret $GITHUB_TOKEN] is a marker") and \
        REFUSAL in refused, refused
    assert notebook.cell("creds")["source"] == CELL and "replace" not in notebook.ops


def test_add_cell_and_run_python_refuse_a_marker_unasked(kernel: KernelSession):
    code = agent_cell(kernel, [("add_cell", {"source": 'API = "[secret $GITHUB_TOKEN]"'}),
                               ("run_python", {"code": 'leaked = "[secret $GITHUB_TOKEN]"'}),
                               ("run_python", {"code": 'ok = os.environ["GITHUB_TOKEN"] == ' + repr(TOKEN)})],
                      options="")
    notebook = FakeNotebook(kernel, cells(code))
    cell = notebook.submit(code)
    approve = cell.wait_for_button("Approve")  # only the last call asks
    kernel.click(approve)
    notebook.run(cell)
    added, ran, fine = kernel.value("outputs()")
    assert added.startswith("error: CellNotWritten: not added: [secret $GITHUB_TOKEN] is a marker") and REFUSAL in added
    assert ran.startswith("error: MisplacedMarker: [secret $GITHUB_TOKEN] is a marker") and \
        'code cannot hold a marker; use os.environ["GITHUB_TOKEN"]' in ran
    assert "insert" not in notebook.ops and len(notebook.cells) == 2
    assert kernel.value("'leaked' in dir()") is False and kernel.value("ok") is True
    assert len([m for m in cell.of_type("comm_open")
                if m["content"].get("data", {}).get("state", {}).get("description") == "Approve"]) == 1
