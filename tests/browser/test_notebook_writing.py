"""The front-end extension (src/index.ts) in a real JupyterLab and Notebook 7 with Chromium: the kernel reads the
notebook's cells, inserts cells and replaces a cell's source over the ``agentkernel.notebook`` comm.

The kernel's end is tests/browser/notebook_comm.py, imported in a cell (the ``%%agent`` tools that will use the
comm are built separately): a later cell ``await``s its requests, and ipykernel dispatches the front end's replies
while the cell awaits. Each test checks what a person sees (the cells, the editor, one Ctrl-Z) and what the notebook
model and the saved ``.ipynb`` hold. Run with ``python -m pytest -m browser tests/browser/test_notebook_writing.py``;
screenshots go to artifacts/browser/ (``writing-lab-*``, ``writing-notebook-*``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab import LABEXTENSION, MEASUREMENTS, REPO, LabServer, NotebookPage, wait_saved

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = [
    pytest.mark.browser,
    # JupyterLab, then Notebook 7: one server (and Chromium) each, for every test of the module.
    pytest.mark.parametrize("lab_server", ["lab", "notebook"], indirect=True, scope="module"),
]

OpenNotebook = Callable[[str], NotebookPage]

FRONT_END_NAMES = {"lab": "jupyterlab", "notebook": "notebook7"}
VERSION = json.loads((REPO / "package.json").read_text())["version"]

HELPER = Path(__file__).parent / "notebook_comm.py"  # copied beside the notebooks: their kernels import it
SETUP = "from notebook_comm import FrontEnd, cell_id, show\nfront_end = FrontEnd()\n"
META = 'meta = lambda n: {"agentkernel": {"run_id": "run-1", "tool_call_id": f"call-{n}"}}\n'

INTRO = "# Sales\nThe numbers are in `sales.csv`."
OLD = "total = 1 + 1  # 🙂 sum\nprint(total)"
NEW = "total = 1 + 2  # 🙂 sum\nprint(total * 10)"
ORIGINAL = "df = load('sales.csv')  \n# 🙂 a note\t\n"

# name: [(cell type, id, source)]; the ids are nbformat 4.5 cell ids, kept by both front ends.
NOTEBOOKS: dict[str, list[tuple[str, str, str]]] = {
    "read.ipynb": [
        ("markdown", "intro", INTRO),
        ("code", "setup", SETUP),
        ("code", "boom", "1 / 0"),
        ("code", "agent", "import time\n"
                          "started = time.perf_counter()\n"
                          "hello = await front_end.ask('hello')  # opens the comm\n"
                          "opened = time.perf_counter()\n"
                          "read = await front_end.ask('read')\n"
                          "seconds = [opened - started, time.perf_counter() - opened]\n"
                          "show(hello=hello, read=read, me=cell_id(), seconds=seconds)"),
        ("code", "later", "print('not run yet')"),
    ],
    "long.ipynb": [
        ("code", "setup", SETUP),
        ("code", "long", "print('x' * 5000)\n3 * 7"),
        ("code", "agent", "show(read=await front_end.ask('read'))"),
    ],
    "insert.ipynb": [
        ("markdown", "intro", INTRO),
        ("code", "setup", SETUP + META),
        ("code", "agent", "first = await front_end.ask('insert', after=cell_id(), cell_type='markdown',\n"
                          "    source='## What I found\\nSales rose.', metadata=meta(1))\n"
                          "second = await front_end.ask('insert', after=first['cell_id'], cell_type='code',\n"
                          "    source=\"print('from the agent')\", metadata=meta(2))\n"
                          "missing = await front_end.ask('insert', after='no-such-cell', cell_type='code',\n"
                          "    source='x = 1', metadata=meta(3))\n"
                          "show(first=first, second=second, missing=missing)"),
        ("code", "user", "print('the user cell')"),
    ],
    "replace.ipynb": [
        ("code", "setup", SETUP + META),
        ("code", "user", OLD),
        ("markdown", "notes", "## Title 🙂\nSome notes."),
        ("code", "agent", "changed = {'agentkernel': {**meta(1)['agentkernel'], 'source_changed': True}}\n"
                          f"replaced = await front_end.ask('replace', cell_id='user',\n"
                          f"    expected_source={OLD!r}, source={NEW!r}, metadata=changed)\n"
                          "notes = await front_end.ask('replace', cell_id='notes',\n"  # only a low surrogate differs
                          "    expected_source='## Title 🙂\\nSome notes.', source='## Title 🙃\\nSome notes.',\n"
                          "    metadata=meta(2))\n"
                          "show(replaced=replaced, notes=notes)"),
    ],
    "refused.ipynb": [
        ("code", "setup", SETUP + META),
        ("code", "user", ORIGINAL),
        ("code", "agent", "changed = await front_end.ask('replace', cell_id='user',\n"
                          "    expected_source=\"df = load('old.csv')\", source='df = 0', metadata=meta(1))\n"
                          "missing = await front_end.ask('replace', cell_id='no-such-cell', expected_source='',\n"
                          "    source='x = 1', metadata=meta(2))\n"
                          "show(changed=changed, missing=missing)"),
    ],
    "restore.ipynb": [
        ("code", "setup", SETUP + META),
        ("code", "user", OLD),
        ("markdown", "notes", "## Notes"),
        ("code", "agent", f"replaced = await front_end.ask('replace', cell_id='user',\n"
                          f"    expected_source={OLD!r}, source={NEW!r}, metadata=meta(1))\n"
                          "added = await front_end.ask('insert', after=cell_id(), cell_type='code',\n"
                          "    source='x = 1', metadata=meta(2))\n"
                          "restored = await front_end.ask('restore', cells=[\n"
                          "    {'cell_id': added['cell_id'], 'expected_source': 'x = 1', 'source': None},\n"
                          f"    {{'cell_id': 'user', 'expected_source': {NEW!r}, 'source': {OLD!r},\n"
                          "     'execution_count': replaced['old_execution_count'],\n"
                          "     'metadata': replaced['old_metadata']},\n"
                          "    {'cell_id': 'notes', 'expected_source': '## Notes (the run)', 'source': 'x'},\n"
                          "    {'cell_id': 'ghost', 'expected_source': '', 'source': None}])\n"
                          "show(replaced=replaced, added=added, restored=restored)"),
    ],
    "restart.ipynb": [
        ("code", "setup", SETUP),
        ("code", "agent", "show(hello=await front_end.ask('hello'), read=await front_end.ask('read'))"),
    ],
}

# The notebook model as the page holds it (jupyterapp is exposed by the servers' expose_app_in_browser).
MODEL = """() => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    return {
        active: notebook.activeCell ? notebook.activeCell.model.id : null,
        cells: notebook.model.sharedModel.cells.map(cell => {
            const json = cell.toJSON();
            return {id: cell.getId(), cell_type: cell.cell_type, source: cell.getSource(), metadata: json.metadata,
                    outputs: json.outputs || null, execution_count: json.execution_count ?? null,
                    can_undo: cell.canUndo()};
        }),
    };
}"""

# The index of the cell holding the page's focus (null: none does).
FOCUSED_CELL = """() => {
    const cell = document.activeElement && document.activeElement.closest('.jp-Cell');
    return cell ? [...document.querySelectorAll('.jp-Notebook .jp-Cell')].indexOf(cell) : null;
}"""


def write_notebook(path: Path, cells: list[tuple[str, str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    nb.cells = [make[kind](source, id=cell_id) for kind, cell_id, source in cells]
    nbformat.write(nb, path)


@pytest.fixture(scope="module", autouse=True)
def notebooks(lab_server: LabServer) -> None:
    if not (LABEXTENSION / "package.json").exists():
        pytest.fail(f"the front-end extension is not built in {LABEXTENSION}: pip install -e . (or jlpm install && "
                    "jlpm build)")
    for name, cells in NOTEBOOKS.items():
        write_notebook(lab_server.root / name, cells)
    shutil.copy(HELPER, lab_server.root / HELPER.name)


def model(nb: NotebookPage) -> dict[str, Any]:
    return nb.page.evaluate(MODEL)


def cell_of(nb: NotebookPage, cell_id: str) -> dict[str, Any]:
    (cell,) = [c for c in model(nb)["cells"] if c["id"] == cell_id]
    return cell


def replies(nb: NotebookPage, index: int) -> dict[str, Any]:
    """Run cell ``index`` (it ends with ``show(...)``) and return the replies it printed."""
    nb.run_and_wait(index, timeout=60)
    cell = model(nb)["cells"][index]
    text = "".join("".join(o["text"]) for o in cell["outputs"] if o["output_type"] == "stream")
    found = re.search(r"^REPLIES (.*)$", text, re.M)
    assert found, f"no replies in the output of cell {index}: {cell['outputs']}"
    return json.loads(found.group(1))


def editor(nb: NotebookPage, index: int) -> Any:
    return nb.cell(index).locator(".jp-InputArea-editor .cm-content")


def prefix(lab_server: LabServer, name: str) -> str:
    return f"writing-{lab_server.front_end}-{name}"


def test_read_returns_every_cell_with_its_id_and_the_running_cell(open_notebook: OpenNotebook,
                                                                    lab_server: LabServer) -> None:
    nb = open_notebook("read.ipynb")
    nb.run_and_wait(1)
    nb.run_and_wait(2)  # raises ZeroDivisionError
    got = replies(nb, 3)
    nb.shot(prefix(lab_server, "read"), 3)

    assert got["hello"] == {"request_id": got["hello"]["request_id"], "ok": True, "can_edit": True,
                            "front_end": FRONT_END_NAMES[lab_server.front_end], "version": VERSION,
                            "path": "read.ipynb"}  # the notebook it answers for (an undo checks it)
    read = got["read"]
    assert read["ok"] is True and read["path"] == "read.ipynb"
    assert [c["id"] for c in read["cells"]] == ["intro", "setup", "boom", "agent", "later"]
    assert got["me"] == "agent" and read["active_cell_id"] == "agent"  # the running cell, as the kernel knows it
    intro, _, boom, agent, later = read["cells"]
    assert intro == {"id": "intro", "cell_type": "markdown", "source": INTRO, "execution_count": None,
                     "has_error": False, "outputs_text": "", "metadata_agentkernel": None, "tags": []}
    assert boom["has_error"] is True and isinstance(boom["execution_count"], int)
    assert boom["outputs_text"] == "ZeroDivisionError: division by zero\n"
    assert agent["source"] == NOTEBOOKS["read.ipynb"][3][2] and agent["has_error"] is False
    assert later["execution_count"] is None and later["outputs_text"] == ""
    opened, read_ = got["seconds"]
    MEASUREMENTS.append(f"notebook comm in {lab_server.front_end}: the first request (comm_open) answered in "
                        f"{opened * 1000:.0f} ms, a read of 5 cells in {read_ * 1000:.0f} ms")


def test_read_cuts_a_cells_outputs_text_at_2000_characters(open_notebook: OpenNotebook) -> None:
    nb = open_notebook("long.ipynb")
    nb.run_and_wait(0)
    nb.run_and_wait(1)
    long = replies(nb, 2)["read"]["cells"][1]
    assert long["id"] == "long" and long["outputs_text"] == "x" * 1999 + "…"  # the stream first, then cut


def test_insert_puts_two_cells_below_the_agent_cell_in_order_and_the_save_keeps_them(
        open_notebook: OpenNotebook, lab_server: LabServer) -> None:
    nb = open_notebook("insert.ipynb")
    nb.run_and_wait(1)
    got = replies(nb, 2)
    first, second, missing = got["first"], got["second"], got["missing"]
    assert first["ok"] is True and first["index"] == 3
    assert second["ok"] is True and second["index"] == 4
    assert missing["ok"] is False and missing["reason"] == "missing" and "no-such-cell" in missing["error"]

    # What a person sees: the markdown (rendered or not) and the code cell, below the agent cell, above theirs.
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(6)
    expect(nb.cell(3)).to_contain_text("What I found")
    expect(editor(nb, 4)).to_have_text("print('from the agent')")
    expect(editor(nb, 5)).to_have_text("print('the user cell')")
    nb.shot(prefix(lab_server, "insert"), 4)

    state = model(nb)
    assert [c["id"] for c in state["cells"]] == ["intro", "setup", "agent", first["cell_id"], second["cell_id"],
                                                 "user"]
    assert state["active"] == "agent"  # the user's active cell did not move, nor the focus to a new cell
    assert nb.page.evaluate(FOCUSED_CELL) in (None, 2)
    new_md, new_code = state["cells"][3], state["cells"][4]
    assert (new_md["cell_type"], new_md["source"]) == ("markdown", "## What I found\nSales rose.")
    assert (new_code["cell_type"], new_code["source"]) == ("code", "print('from the agent')")
    assert new_md["metadata"]["agentkernel"] == {"run_id": "run-1", "tool_call_id": "call-1"}
    assert new_code["metadata"]["agentkernel"] == {"run_id": "run-1", "tool_call_id": "call-2"}
    assert new_code["outputs"] == [] and new_code["execution_count"] is None  # nothing ran

    nb.page.keyboard.press("Control+s")
    saved = wait_saved(lab_server.root / "insert.ipynb", lambda nb_: len(nb_.cells) == 6)
    assert [c.get("id") for c in saved.cells] == [c["id"] for c in state["cells"]]
    assert saved.cells[3].cell_type == "markdown" and saved.cells[3].source == "## What I found\nSales rose."
    assert saved.cells[4].source == "print('from the agent')"
    assert saved.cells[3].metadata["agentkernel"] == {"run_id": "run-1", "tool_call_id": "call-1"}
    assert saved.cells[4].metadata["agentkernel"] == {"run_id": "run-1", "tool_call_id": "call-2"}


def test_replace_shows_the_new_source_and_one_undo_restores_the_old(open_notebook: OpenNotebook,
                                                                     lab_server: LabServer) -> None:
    nb = open_notebook("replace.ipynb")
    nb.run_and_wait(0)
    assert cell_of(nb, "user")["can_undo"] is False
    got = replies(nb, 3)
    assert got["replaced"] == {"request_id": got["replaced"]["request_id"], "ok": True, "old_source": OLD,
                               "old_execution_count": None, "old_metadata": {"agentkernel": None}}
    assert got["notes"]["ok"] is True and got["notes"]["old_source"] == "## Title 🙂\nSome notes."
    expect(nb.cell(2).locator("h2")).to_have_text(re.compile(r"^Title 🙃"))  # the rendered markdown follows
    assert cell_of(nb, "notes")["source"] == "## Title 🙃\nSome notes."  # no surrogate pair split
    expect(editor(nb, 1)).to_have_text(NEW.replace("\n", ""))  # CodeMirror draws each line as a block
    user = cell_of(nb, "user")
    assert user["source"] == NEW
    assert user["metadata"]["agentkernel"] == {"run_id": "run-1", "tool_call_id": "call-1", "source_changed": True}
    expect(nb.cell(1)).to_have_class(re.compile(r"\bjp-agentkernel-stale\b"))  # edited, not run since: marked
    assert nb.prompt(1).get_attribute("title") == ("edited by agentkernel (run run-1): its outputs were made by the "
                                                   "source before")
    nb.shot(prefix(lab_server, "replace-1-replaced"), 1)

    editor(nb, 1).click()  # into the edited cell's editor, as a person does, and one Ctrl-Z
    nb.page.keyboard.press("Control+z")
    expect(editor(nb, 1)).to_have_text(OLD.replace("\n", ""))
    user = cell_of(nb, "user")
    assert user["source"] == OLD  # exactly the old source, in one step
    assert user["can_undo"] is False  # nothing else was on the cell's undo stack
    expect(nb.cell(1)).not_to_have_class(re.compile(r"\bjp-agentkernel-stale\b"))  # its metadata is the old one
    nb.shot(prefix(lab_server, "replace-2-undone"), 1)
    nb.page.keyboard.press("Control+Shift+z")  # redone: marked again, until the cell runs
    expect(nb.cell(1)).to_have_class(re.compile(r"\bjp-agentkernel-stale\b"))
    nb.run_and_wait(1)
    expect(nb.cell(1)).not_to_have_class(re.compile(r"\bjp-agentkernel-stale\b"))


def test_replace_is_refused_when_the_cell_changed_and_leaves_it_untouched(open_notebook: OpenNotebook,
                                                                           lab_server: LabServer) -> None:
    nb = open_notebook("refused.ipynb")
    nb.run_and_wait(0)
    before = cell_of(nb, "user")
    got = replies(nb, 2)
    changed, missing = got["changed"], got["missing"]
    assert changed["ok"] is False and changed["reason"] == "changed" and changed["source"] == ORIGINAL
    assert changed["error"]
    assert missing["ok"] is False and missing["reason"] == "missing" and "no-such-cell" in missing["error"]
    after = cell_of(nb, "user")
    assert after == before and after["source"] == ORIGINAL  # byte-identical, no metadata, nothing to undo
    assert "agentkernel" not in after["metadata"] and after["can_undo"] is False
    nb.shot(prefix(lab_server, "refused"), 1)


def test_the_front_end_answers_after_a_kernel_restart_and_a_change_of_kernel(open_notebook: OpenNotebook,
                                                                              lab_server: LabServer) -> None:
    nb = open_notebook("restart.ipynb")

    def ask() -> None:
        nb.page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        nb.wait_prompt(1, re.compile(r"^\[ \]:$"))
        nb.run_and_wait(0)
        got = replies(nb, 1)
        assert got["hello"]["ok"] is True and got["read"]["ok"] is True, got
        assert [c["id"] for c in got["read"]["cells"]] == ["setup", "agent"]

    ask()
    kernel = "window.jupyterapp.shell.currentWidget.sessionContext"
    first = nb.page.evaluate(f"() => {kernel}.session.kernel.id")
    nb.page.evaluate(f"() => {kernel}.session.kernel.restart()")  # the same kernel connection, restarted
    nb.wait_idle()
    ask()
    nb.page.evaluate(f"() => {kernel}.changeKernel({{name: 'python3'}})")  # a new kernel: a new connection
    nb.page.wait_for_function(f"(first) => {kernel}.session?.kernel?.id && {kernel}.session.kernel.id !== first",
                              arg=first)
    nb.wait_idle()
    ask()
    nb.shot(prefix(lab_server, "after-kernel-change"), 1)


def test_restore_takes_a_runs_cells_back_and_leaves_a_changed_one(open_notebook: OpenNotebook,
                                                                   lab_server: LabServer) -> None:
    nb = open_notebook("restore.ipynb")
    nb.run_and_wait(0)
    nb.run_and_wait(1)  # the user's cell has run: it has an execution count
    count = cell_of(nb, "user")["execution_count"]
    got = replies(nb, 3)
    replaced, restored = got["replaced"], got["restored"]
    assert replaced["old_execution_count"] == count and replaced["old_metadata"] == {"agentkernel": None}
    assert restored == {"request_id": restored["request_id"], "ok": True, "removed": [got["added"]["cell_id"]],
                        "restored": ["user"], "changed": [{"cell_id": "notes", "source": "## Notes"}],
                        "missing": ["ghost"]}
    state = model(nb)
    assert [c["id"] for c in state["cells"]] == ["setup", "user", "notes", "agent"]
    user = cell_of(nb, "user")
    assert user["source"] == OLD and user["execution_count"] == count  # not run since: its count is back
    assert "agentkernel" not in user["metadata"]
    assert cell_of(nb, "notes")["source"] == "## Notes"  # not what the run wrote: left as it is
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(4)
    expect(editor(nb, 1)).to_have_text(OLD.replace("\n", ""))
    nb.shot(prefix(lab_server, "restore"), 1)

    editor(nb, 1).click()  # the cell's undo stack holds the edit and the restore, each one step, text intact
    nb.page.keyboard.press("Control+z")
    expect(editor(nb, 1)).to_have_text(NEW.replace("\n", ""))
    nb.page.keyboard.press("Control+z")
    expect(editor(nb, 1)).to_have_text(OLD.replace("\n", ""))
    assert cell_of(nb, "user")["source"] == OLD

