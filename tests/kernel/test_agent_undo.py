"""``%agent_undo`` in a real kernel, with agentkernel's front-end extension played in Python (tests/support/
fake_notebook.py): a run adds two cells and edits one, the user edits another cell, and one undo takes the run's
changes back (added cells removed, the edited cell given its source, execution count and metadata back) while the
user's edit stays; cells the user changed since the run wrote them are left as they are and named, and taken back
by a later undo once they are as the run left them; runs undo newest first; the Undo button's silent request works
as a cell does, and so does the live panel's while the run goes on; and where no extension answers, or the magic
cannot await, one line says why; a second notebook on the kernel cannot mark the first one's run undone (it is
refused by name, and its front end's answers to the first's requests are dropped).
"""

from __future__ import annotations

from typing import Any

from fake_notebook import FakeNotebook, another_page, code_cell
from kernel_client import KernelSession, button_description, kernel_fixtures, widget_state

from agentkernel.jupyter.kernel.undo import UNDO_LABEL, UNDO_MIME

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE"):
    os.environ.pop(_name, None)
get_ipython()._agentkernel_notebook = None
get_ipython()._agentkernel_changes = None
from agentkernel import Call, ScriptedModel
"""

session, kernel = kernel_fixtures("agent_undo", SETUP)

WRITES = [("read_notebook", {}),
          ("add_cell", {"source": "## Findings\nOslo is wettest.", "cell_type": "markdown"}),
          ("add_cell", {"source": "max(rain, key=rain.get)"}),
          ("edit_cell", {"cell_id": "load", "source": "rain = {'Oslo': 3, 'Lima': 1}"})]


def notebook_cells() -> list[dict[str, Any]]:
    return [code_cell("load", "rain = {'Oslo': 3, 'Lima': 0}", 4), code_cell("agent", ""),
            code_cell("mine", "total = 0", 5)]


def run_agent(kernel: KernelSession, notebook: FakeNotebook, calls: list[tuple[str, dict]], changed: int = 3) -> str:
    """Run a scripted %%agent cell that makes ``calls`` (writes allowed) and changes ``changed`` cells; its run id."""
    script = ", ".join(f"Call({name!r}, {arguments!r})" for name, arguments in calls)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    code = "%%agent -m m --allow-writes\ngo"
    notebook.cell("agent")["source"] = code
    cell = notebook.run(notebook.submit(code))
    undo_outputs = [(m["content"]["data"][UNDO_MIME], m["content"]["metadata"][UNDO_MIME])
                    for m in cell.of_type("display_data") if UNDO_MIME in m["content"]["data"]]
    run_id = kernel.value("_agent.run_id")
    assert undo_outputs == [({"cells": changed}, {"run_id": run_id})]  # the extension's Undo button
    return run_id


def undo(notebook: FakeNotebook, line: str = "", *, silent: bool = False) -> str:
    """Run ``%agent_undo line`` as a cell (or as the Undo button does); the one line it printed."""
    cell = notebook.run(notebook.submit(f"%agent_undo {line}".strip(), cell_id="undo", silent=silent))
    assert cell.stdout.count("\n") == 1, cell.describe()
    return cell.stdout.strip()


def test_one_undo_takes_back_the_run_and_keeps_the_users_edit(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    run_id = run_agent(kernel, notebook, WRITES)
    load = notebook.cell("load")
    assert load["source"] == "rain = {'Oslo': 3, 'Lima': 1}" and load["execution_count"] is None  # outputs stale
    assert load["metadata"]["agentkernel"]["run_id"] == run_id
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "new-1", "new-2", "mine"]
    notebook.cell("mine")["source"] = "total = sum(rain.values())"  # the user's own edit, after the run

    assert undo(notebook) == f"undid run {run_id}: removed 2 added cells, restored 1 edited cell"
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "mine"]
    assert notebook.cell("load") == {**code_cell("load", "rain = {'Oslo': 3, 'Lima': 0}", 4), "metadata": {}}
    assert notebook.cell("mine")["source"] == "total = sum(rain.values())"
    (restore,) = [r for r in notebook.requests if r["op"] == "restore"]  # one request: one step
    assert [(c["cell_id"], c["source"]) for c in restore["cells"]] == [
        ("new-1", None), ("new-2", None), ("load", "rain = {'Oslo': 3, 'Lima': 0}")]
    assert undo(notebook) == "nothing left to undo: the notebook changes of this kernel's runs have been taken back"
    kernel.ok("get_ipython()._agentkernel_changes = None")  # a kernel none of whose runs changed the notebook
    assert undo(notebook) == ("nothing to undo: no run of this kernel has changed the notebook (add_cell and "
                              "edit_cell change it where the extension answers: only JupyterLab and Notebook 7 "
                              "with agentkernel's extension can change cells)")


def test_cells_the_user_changed_are_named_and_left_and_a_later_undo_takes_them(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    run_id = run_agent(kernel, notebook, WRITES)
    notebook.cell("new-2")["source"] = "max(rain, key=rain.get)  # mine now"
    notebook.cell("load")["source"] = "rain = {'Oslo': 3, 'Lima': 2}"
    assert undo(notebook, run_id) == (
        f"undid part of run {run_id}: removed 1 added cell; left as they are, changed since the run wrote them: "
        "cell new-2 (max(rain, key=rain.get)  # mine now), cell load (rain = {'Oslo': 3, 'Lima': 2}) (once they "
        f"are as the run left them, %agent_undo {run_id} takes them back too)")
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "new-2", "mine"]
    assert notebook.cell("load")["source"] == "rain = {'Oslo': 3, 'Lima': 2}"

    assert undo(notebook).startswith(f"did not undo run {run_id}: left as they are")  # nothing changed back yet
    notebook.cell("new-2")["source"] = "max(rain, key=rain.get)"  # the user puts them back as the run left them
    notebook.cell("load")["source"] = "rain = {'Oslo': 3, 'Lima': 1}"
    notebook.cell("load")["execution_count"] = 9  # and runs the edited cell: its outputs are the run's source's
    assert undo(notebook) == f"undid run {run_id}: removed 1 added cell, restored 1 edited cell"
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "mine"]
    assert notebook.cell("load")["source"] == "rain = {'Oslo': 3, 'Lima': 0}"
    assert notebook.cell("load")["execution_count"] is None  # those outputs are stale again


def test_runs_undo_newest_first_and_a_cell_two_runs_edited_comes_back_in_steps(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    first = run_agent(kernel, notebook, [("read_notebook", {}), ("edit_cell", {"cell_id": "load", "source": "a"}),
                                         ("edit_cell", {"cell_id": "load", "source": "b"})], 1)
    second = run_agent(kernel, notebook, [("read_notebook", {}), ("edit_cell", {"cell_id": "load", "source": "c"}),
                                          ("add_cell", {"source": "x = 1"}), ("edit_cell", {"cell_id": "new-1",
                                                                                           "source": "x = 2"})], 2)
    assert undo(notebook, first).startswith(f"did not undo run {first}: left as they are, changed since the run "
                                            "wrote them: cell load (c)")
    assert undo(notebook) == f"undid run {second}: removed 1 added cell, restored 1 edited cell"
    assert notebook.cell("load")["source"] == "b"
    assert undo(notebook) == f"undid run {first}: restored 1 edited cell"
    assert notebook.cell("load")["source"] == "rain = {'Oslo': 3, 'Lima': 0}"  # before the first run's first edit
    assert undo(notebook, second) == f"nothing left to undo of run {second}"
    assert undo(notebook, "feedc0ffee00").startswith("nothing to undo: run feedc0ffee00 did not change the notebook")


def test_the_undo_buttons_silent_request_undoes_as_a_cell_does(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    run_id = run_agent(kernel, notebook, WRITES)
    count = kernel.value("get_ipython().execution_count")
    assert undo(notebook, run_id, silent=True) == f"undid run {run_id}: removed 2 added cells, restored 1 edited cell"
    assert kernel.value("get_ipython().execution_count") == count  # no execution count taken
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "mine"]


def test_without_the_extension_one_line_says_why_and_the_run_stays_undoable(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    run_id = run_agent(kernel, notebook, WRITES)
    gone = FakeNotebook(kernel, notebook.cells, close=True)  # the page reloaded in a front end without it
    assert undo(gone) == (f"cannot undo run {run_id} here: the front end closed the notebook comm (agentkernel's "
                          "extension is not installed there); only JupyterLab and Notebook 7 with agentkernel's "
                          "extension can change cells")
    kernel.ok("get_ipython()._agentkernel_notebook = None")  # a new kernel client that is no front end at all
    quiet = kernel.run("%agent_undo")  # nobody answers (a headless runner): after the hello's timeout
    assert quiet.stdout.strip().startswith(f"cannot undo run {run_id} here: no notebook front end answered in 2 s")
    assert quiet.stdout.count("\n") == 1
    kernel.ok("get_ipython()._agentkernel_notebook = None")  # a page with the extension (a new client session)
    assert undo(FakeNotebook(kernel, notebook.cells)).startswith(f"undid run {run_id}: ")


def test_where_the_magic_cannot_await_it_says_so_in_one_line(kernel: KernelSession):
    notebook = FakeNotebook(kernel, notebook_cells())
    run_agent(kernel, notebook, WRITES)
    inline = kernel.ok("x = 1\n%agent_undo")
    assert inline.stdout == ("cannot undo here: the front end's answers arrive only while the cell awaits, and "
                             "%agent_undo must be alone in its cell, which is then awaited\n")
    off = kernel.ok("%autoawait False\n%agent_undo")
    assert off.stdout.endswith("and %autoawait is off (%autoawait on lets it wait)\n")
    kernel.ok("%autoawait True")
    assert kernel.ok("%agent_undo a b").stdout == "%agent_undo takes at most one run id, not 'a b'\n"
    assert len(notebook.cells) == 5  # nothing was undone


def test_the_live_panels_undo_button_takes_back_what_the_run_changed_so_far(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('add_cell', {'source': 'x = 1'}), Call('run_python', {'code': '1'}), 'done'])")
    notebook = FakeNotebook(kernel, notebook_cells())
    code = "%%agent -m m\ngo"
    cell = notebook.submit(code)
    notebook.serve_until(cell, lambda: any(button_description(m) == "Approve" for m in cell.messages))
    kernel.click(cell.wait_for_button("Approve"))
    notebook.serve_until(cell, lambda: any(button_description(m) == UNDO_LABEL for m in cell.messages))
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "new-1", "mine"]
    # run_python now waits for its approval: the run is still going when the user clicks Undo
    notebook.serve_until(cell, lambda: sum(button_description(m) == "Approve" for m in cell.messages) == 2)
    (opened,) = [m for m in cell.messages if button_description(m) == UNDO_LABEL]
    run_id = widget_state(opened)["tooltip"].split()[1].rstrip(":")  # "%agent_undo RUN_ID: ..."
    kernel.click(opened["content"]["comm_id"])

    def said() -> list[str]:
        return [widget_state(m).get("value", "") for items in kernel.iopub.values() for _, m in items
                if str(widget_state(m).get("value", "")).startswith(("undid", "cannot", "did not"))]

    notebook.serve_until(cell, lambda: bool(said()))
    assert said() == [f"undid run {run_id}: removed 1 added cell"]
    assert [c["id"] for c in notebook.cells] == ["load", "agent", "mine"]
    deny = [m["content"]["comm_id"] for m in cell.messages if button_description(m) == "Deny"][-1]
    kernel.click(deny)
    notebook.run(cell)
    assert not [bundle for bundle in cell.displays if UNDO_MIME in bundle]  # nothing left for the record's button
    opened = {m["content"]["comm_id"] for m in cell.of_type("comm_open")
              if m["content"].get("target_name") == "jupyter.widget"}
    assert opened <= {m["content"]["comm_id"] for m in cell.of_type("comm_close")}  # the button closed with the panel


def test_a_second_notebook_on_the_kernel_cannot_mark_the_first_ones_run_undone(kernel: KernelSession):
    first = FakeNotebook(kernel, notebook_cells(), path="first.ipynb")
    run_id = run_agent(kernel, first, WRITES)
    second = FakeNotebook(kernel, [code_cell("other", "y = 2")], path="second.ipynb", client=another_page(kernel))
    assert undo(second, run_id) == (f"cannot undo run {run_id} from second.ipynb: it changed first.ipynb (undo it "
                                    "from there)")
    assert undo(second) == (f"cannot undo run {run_id} from second.ipynb: it changed first.ipynb (undo it from "
                            "there)")
    assert second.ops == ["hello", "hello"] and len(first.cells) == 5  # no restore was asked anywhere
    # an older extension that does not name its notebook: none of the run's cells is there, so the run stays
    older = FakeNotebook(kernel, [code_cell("other", "y = 2")], path="", client=another_page(kernel))
    assert undo(older, run_id) == (f"did not undo run {run_id}: none of the cells it changed is in this notebook "
                                   "(it changed another notebook, or they were deleted)")

    # The first notebook's undo: the second page sees its comm too and answers its hello first; that answer is
    # not from the page that asked, so it is dropped, and the first notebook's own answer is taken.
    cell = first.submit(f"%agent_undo {run_id}", cell_id="undo")
    second.serve_until(cell, lambda: any(m["msg_type"] == "comm_open" for m in cell.messages))
    assert second.ops[-1] == "hello"
    first.run(cell)
    assert cell.stdout == f"undid run {run_id}: removed 2 added cells, restored 1 edited cell\n"
    assert [c["id"] for c in first.cells] == ["load", "agent", "mine"]
    assert [c["id"] for c in second.cells] == ["other"]
