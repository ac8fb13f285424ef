"""``%%agent``'s notebook tools end to end, in JupyterLab and Notebook 7 with agentkernel's front-end extension and
Chromium: a scripted model reads the notebook (the Markdown cell above the agent's is in what it read), adds a
Markdown and a code cell after Approve (below the agent's cell, in order, saved with ``metadata.agentkernel``),
edits a user's cell after Approve (the editor shows the new source; one undo restores the old), is denied an edit
with a note (the cell unchanged, the note reaches the model), and is refused an edit of a cell the user changed
after the read. Undo: a run adds two cells and edits one (its execution count cleared), the user edits another cell,
and the record's Undo button takes the run back (the user's edit stays); where the user edited a cell the run
changed, the undo leaves and names it. The kernel-level twins, the front end played in Python, are
tests/kernel/test_notebook_comm.py and tests/kernel/test_agent_undo.py.

The extension must be built into ``agentkernel/labextension`` (``pip install -e .``, or ``jlpm build``).
Screenshots: artifacts/browser/agent-writes-*.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import nbformat
import pytest
from lab import LABEXTENSION, LabServer, NotebookPage, wait_saved

expect = pytest.importorskip("playwright.sync_api").expect


pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("lab_server", ["lab", "notebook"], indirect=True, scope="module"),
]

OpenNotebook = Callable[[str], NotebookPage]
STALE = re.compile(r"\bjp-agentkernel-stale\b")  # the mark of a cell the agent edited, not run since
INTRO = "# Rain study\nWhich city is **wettest**?"
SHOW = "for o in _agent.history:\n    if o['type'] == 'function_call_output':\n        print('OUTPUT', o['output'])"


def setup(*calls: str) -> str:
    return ("%load_ext agentkernel\nfrom agentkernel import Call, ScriptedModel\n"
            f"m = ScriptedModel([{', '.join(calls)}, 'done'])")


READ = "Call('read_notebook')"
EDIT = "Call('edit_cell', {'cell_id': 'user', 'source': 'y = 2'})"
NOTEBOOKS: dict[str, list[tuple[str, str, str]]] = {
    "write.ipynb": [
        ("markdown", "intro", INTRO),
        ("code", "setup", setup(READ, "Call('add_cell', {'source': '## Findings\\nPune.', 'cell_type': 'markdown'})",
                                "Call('add_cell', {'source': 'total = y + 1'})", EDIT)),
        ("code", "user", "y = 1"),
        ("code", "agent", "%%agent -m m\nWrite it down."),
        ("code", "show", SHOW),
    ],
    "deny.ipynb": [("code", "setup", setup(READ, EDIT)), ("code", "user", "y = 1"),
                   ("code", "agent", "%%agent -m m\nChange y."), ("code", "show", SHOW)],
    "changed.ipynb": [("code", "setup", setup(READ, EDIT)), ("code", "user", "y = 1"),
                      ("code", "agent", "%%agent -m m\nChange y."), ("code", "show", SHOW)],
}
WRITES = setup(READ, "Call('add_cell', {'source': '## Findings\\nPune.', 'cell_type': 'markdown'})",
               "Call('add_cell', {'source': 'total = y + 1'})", EDIT)
NOTEBOOKS["undo-live.ipynb"] = [
    ("code", "setup", setup("Call('add_cell', {'source': 'x = 1'})", "Call('run_python', {'code': '1'})")),
    ("code", "agent", "%%agent -m m\nAdd, then run.")]
NOTEBOOKS["undo-variables.ipynb"] = [
    ("code", "setup", setup("Call('add_cell', {'source': '## Findings', 'cell_type': 'markdown'})",
                            "Call('run_python', {'code': \"rows.append(2)\\nmodel = 'fitted'\\ntmp = 1\"})")
     + "\nrows, model = [1], 'untrained'"),
    ("code", "agent", "%%agent -m m --allow-writes\nWork."),
    ("code", "mine", "model = 'mine'"),
    ("code", "show", "print(rows, model, 'tmp' in dir())")]
for name in ("undo.ipynb", "undo-changed.ipynb"):
    NOTEBOOKS[name] = [("code", "setup", WRITES), ("code", "user", "y = 1"), ("code", "mine", "z = 1"),
                       ("code", "agent", "%%agent -m m --allow-writes\nWrite it down.")]


@pytest.fixture(autouse=True)
def notebooks(lab_server: LabServer) -> None:
    if not (LABEXTENSION / "package.json").exists():
        pytest.fail(f"the front-end extension is not built in {LABEXTENSION}: pip install -e . (or jlpm install && "
                    "jlpm build)")
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nb.cells = [nbformat.v4.new_markdown_cell(source, id=cell_id) if kind == "markdown"
                    else nbformat.v4.new_code_cell(source, id=cell_id) for kind, cell_id, source in cells]
        nbformat.write(nb, lab_server.root / name)


def editor(nb: NotebookPage, index: int) -> Any:
    return nb.cell(index).locator(".jp-InputArea-editor .cm-content")


def approve(nb: NotebookPage, index: int, name: str = "Approve") -> None:
    button = nb.output(index).get_by_role("button", name=re.compile(rf"^\W*{name}$")).last
    expect(button).to_be_enabled(timeout=30_000)
    button.click()


def outputs(nb: NotebookPage, index: int) -> str:
    nb.run_and_wait(index, 30)
    return nb.output(index).inner_text()


def shot(nb: NotebookPage, server: LabServer, name: str, index: int) -> None:
    nb.shot(f"agent-writes-{server.front_end}-{name}", index)


def test_reads_adds_two_cells_in_order_and_edits_a_cell_one_undo_restores(open_notebook: OpenNotebook,
                                                                          lab_server: LabServer) -> None:
    nb = open_notebook("write.ipynb")
    nb.run_and_wait(1, 60)
    nb.run(3)
    expect(nb.output(3)).to_contain_text("markdown cell · 2 lines", timeout=30_000)  # the cell to add, shown
    shot(nb, lab_server, "1-approve-add", 3)
    approve(nb, 3, "Approve add_cell for this run")
    expect(nb.output(3)).to_contain_text("the change · before → after", timeout=30_000)  # the edit, as a diff
    shot(nb, lab_server, "2-approve-edit", 3)
    approve(nb, 3)
    nb.wait_done(3, 60)

    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(7)
    expect(nb.cell(4)).to_contain_text("Findings")  # below the agent's cell, in the order written
    expect(editor(nb, 5)).to_have_text("total = y + 1")
    expect(editor(nb, 2)).to_have_text("y = 2")
    shot(nb, lab_server, "3-written", 3)
    shown = outputs(nb, 6)
    read, added_markdown, added_code, edited = re.findall(r"^OUTPUT (.*)$", shown, re.M)
    assert read.startswith("notebook write.ipynb, live in ")
    assert "# Rain study\nWhich city is **wettest**?" in shown  # the Markdown cell above, as the model read it
    assert added_markdown.startswith("added a markdown cell") and added_code.startswith("added a code cell")
    assert edited.startswith("edited cell user (one undo in its editor restores it)")

    editor(nb, 2).click()  # one undo in the edited cell's editor restores the user's source
    nb.page.keyboard.press("Control+z")
    expect(editor(nb, 2)).to_have_text("y = 1")
    nb.page.keyboard.press("Control+s")
    saved = wait_saved(lab_server.root / "write.ipynb", lambda s: len(s.cells) == 7 and s.cells[2].source == "y = 1")
    assert [c.cell_type for c in saved.cells[4:6]] == ["markdown", "code"]
    assert [c.source for c in saved.cells[4:6]] == ["## Findings\nPune.", "total = y + 1"]
    for cell in saved.cells[4:6]:
        meta = cell.metadata["agentkernel"]
        assert len(meta["run_id"]) == 12 and meta["tool_call_id"]


def test_an_edit_denied_with_a_note_leaves_the_cell_and_the_note_reaches_the_model(open_notebook: OpenNotebook,
                                                                                    lab_server: LabServer) -> None:
    nb = open_notebook("deny.ipynb")
    nb.run_and_wait(0, 60)
    nb.run(2)
    note = nb.output(2).locator("input[placeholder^='Deny with a note']")
    expect(note).to_be_enabled(timeout=30_000)
    note.fill("keep y as it is")
    approve(nb, 2, "Deny")
    nb.wait_done(2, 60)
    expect(editor(nb, 1)).to_have_text("y = 1")
    shot(nb, lab_server, "denied", 2)
    assert "OUTPUT denied by the user: keep y as it is" in outputs(nb, 3)


def test_an_edit_of_a_cell_the_user_changed_after_the_read_is_refused(open_notebook: OpenNotebook,
                                                                     lab_server: LabServer) -> None:
    nb = open_notebook("changed.ipynb")
    nb.run_and_wait(0, 60)
    nb.run(2)
    expect(nb.output(2)).to_contain_text("the change · before → after", timeout=30_000)
    editor(nb, 1).click()  # while the approval waits, the user changes the cell
    nb.page.keyboard.press("End")
    nb.page.keyboard.type("  # mine")
    approve(nb, 2)
    nb.wait_done(2, 60)
    expect(editor(nb, 1)).to_have_text("y = 1  # mine")
    shot(nb, lab_server, "refused", 2)
    assert "not edited: cell user changed since it was read" in outputs(nb, 3)


def run_the_writing_agent(nb: NotebookPage, lab_server: LabServer, name: str) -> None:
    """Run setup, the user's cell and the agent (two cells added below it, the user's cell edited)."""
    nb.run_and_wait(0, 60)
    nb.run_and_wait(1)
    nb.run_and_wait(3, 60)
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(6)
    expect(editor(nb, 1)).to_have_text("y = 2")
    expect(nb.prompt(1)).to_have_text(re.compile(r"^\[ \]:$"))  # its outputs were made by the old source
    expect(nb.cell(1)).to_have_class(STALE)  # and the extension marks it so
    expect(nb.output(3).get_by_role("button", name="Undo this run")).to_be_visible()
    shot(nb, lab_server, f"{name}-1-written", 3)


def type_into(nb: NotebookPage, index: int, text: str) -> None:
    editor(nb, index).click()
    nb.page.keyboard.press("End")
    nb.page.keyboard.type(text)


def click_undo(nb: NotebookPage) -> Any:
    nb.output(3).get_by_role("button", name="Undo this run").click()
    line = nb.output(3).locator(".jp-agentkernel-undo-line")
    expect(line).not_to_have_text(re.compile(r"^(run |undoing)"), timeout=30_000)
    return line


def test_undo_takes_the_run_back_in_one_click_and_keeps_the_users_edit(open_notebook: OpenNotebook,
                                                                        lab_server: LabServer) -> None:
    nb = open_notebook("undo.ipynb")
    run_the_writing_agent(nb, lab_server, "undo")
    type_into(nb, 2, "  # the user's")  # the user edits a cell the run did not touch
    line = click_undo(nb)
    expect(line).to_have_text(re.compile(r"^undid run \w{12}: removed 2 added cells, restored 1 edited cell$"))
    expect(nb.output(3).get_by_role("button", name="Undo this run")).to_be_disabled()
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(4)
    expect(editor(nb, 1)).to_have_text("y = 1")
    expect(nb.prompt(1)).to_have_text(re.compile(r"^\[\d+\]:$"))  # its outputs are the old source's again
    expect(nb.cell(1)).not_to_have_class(STALE)
    expect(editor(nb, 2)).to_have_text("z = 1  # the user's")
    shot(nb, lab_server, "undo-2-undone", 3)
    nb.page.keyboard.press("Control+s")
    saved = wait_saved(lab_server.root / "undo.ipynb",
                       lambda s: len(s.cells) == 4 and s.cells[1].source == "y = 1" and s.cells[2].source != "z = 1")
    assert [c.source for c in saved.cells[1:3]] == ["y = 1", "z = 1  # the user's"]
    assert "agentkernel" not in saved.cells[1].metadata and isinstance(saved.cells[1].execution_count, int)


def test_undo_leaves_and_names_a_cell_the_user_changed_after_the_run(open_notebook: OpenNotebook,
                                                                      lab_server: LabServer) -> None:
    nb = open_notebook("undo-changed.ipynb")
    run_the_writing_agent(nb, lab_server, "undo-changed")
    type_into(nb, 1, "  # mine now")  # the user edits the cell the run changed
    line = click_undo(nb)
    expect(line).to_have_text(re.compile(r"^undid part of run \w+: removed 2 added cells; left as they are, changed "
                                         r"since the run wrote them: cell user \(y = 2  # mine now\) "))
    expect(nb.output(3).get_by_role("button", name="Undo this run")).to_be_enabled()
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(4)
    expect(editor(nb, 1)).to_have_text("y = 2  # mine now")
    shot(nb, lab_server, "undo-changed-2-named", 3)


def test_the_live_panels_undo_takes_back_what_the_run_added_while_it_runs(open_notebook: OpenNotebook,
                                                                          lab_server: LabServer) -> None:
    nb = open_notebook("undo-live.ipynb")
    nb.run_and_wait(0, 60)
    nb.run(1)
    approve(nb, 1)  # add_cell
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(3)
    expect(nb.output(1)).to_contain_text("run_python", timeout=30_000)  # now waiting for run_python's approval
    undo = nb.output(1).get_by_role("button", name=re.compile(r"Undo this run's notebook changes$"))
    undo.click()
    expect(nb.output(1)).to_contain_text(re.compile(r"undid run \w{12}: removed 1 added cell"), timeout=30_000)
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(2)
    shot(nb, lab_server, "undo-live", 1)
    approve(nb, 1, "Deny")
    nb.wait_done(1, 60)
    expect(nb.output(1).get_by_role("button", name=re.compile("Undo this run's notebook changes"))).to_have_count(0)



def test_one_click_takes_back_the_cells_and_the_variables_and_says_what_it_left(open_notebook: OpenNotebook,
                                                                                lab_server: LabServer) -> None:
    nb = open_notebook("undo-variables.ipynb")
    nb.run_and_wait(0, 60)
    nb.run_and_wait(1, 60)
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(5)  # its Markdown cell, below the agent's
    expect(nb.output(1)).to_contain_text("rows (in place), model (rebound), tmp (new)")  # the call's title
    nb.run_and_wait(3)  # the user rebinds model after the run
    button = nb.output(1).get_by_role("button", name="Undo this run")
    expect(nb.output(1).locator(".jp-agentkernel-undo-line")).to_have_text(
        re.compile(r"^run \w{12} changed 1 cell and 3 variables$"))
    button.click()
    line = nb.output(1).locator(".jp-agentkernel-undo-line")
    expect(line).to_have_text(re.compile(
        r"^undid part of run \w{12}: removed 1 added cell; variables: restored 2 variables: rows \(contents\), tmp "
        r"\(removed\); left as they are, changed since the run: model; what the code of its 1 run_python call did "
        r"outside the kernel's variables \(files, requests\) is not undone$"), timeout=30_000)
    expect(nb.page.locator(".jp-Notebook .jp-Cell")).to_have_count(4)
    shot(nb, lab_server, "undo-variables", 1)
    assert outputs(nb, 3).strip() == "[1] mine False"
