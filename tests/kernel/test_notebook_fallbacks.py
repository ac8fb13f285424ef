"""The notebook tools where no front-end extension answers, in a real kernel: through jupyter_client (as VS Code or
a kernel client without agentkernel's extension talks to it) and through nbclient (as papermill and nbmake run a
notebook).

read_notebook reads the saved ``.ipynb`` named by ``__session__`` (Jupyter's server sets it through
``JPY_SESSION_NAME``) and says it is the saved file, or says no notebook is known and shows the input history;
add_cell queues its cells for ONE ``set_next_input`` payload at the run's end; edit_cell is refused, saying this
front end cannot edit. The model is told once per run that no extension answers, and no run waits longer than the
hello's timeout, which a kernel pays once per client session.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
from kernel_client import Cell, KernelSession, kernel_env, kernel_fixtures
from nbclient import NotebookClient

from agentkernel.jupyter.kernel.notebook import HELLO_TIMEOUT

MARGIN = 1.5  # seconds a scripted run takes beside the waits (measured: 0.05-0.2 s)

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "__session__", "__vsc_ipynb_file__"):
    os.environ.pop(_name, None)
    globals().pop(_name, None)
from agentkernel import Call, ScriptedModel


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]
"""

session, kernel = kernel_fixtures("notebook_fallbacks", SETUP)


def saved_notebook(path: Path) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Rain study\nWhere does it rain most?", id="intro"),
        nbformat.v4.new_code_cell("rain = {'Oslo': 3, 'Lima': 0}\nrain", id="load", execution_count=1, outputs=[
            nbformat.v4.new_output("execute_result", {"text/plain": "{'Oslo': 3, 'Lima': 0}"}, execution_count=1)]),
        nbformat.v4.new_code_cell("1 / 0", id="broken", execution_count=2, outputs=[
            nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])]),
    ]
    nbformat.write(notebook, path)
    return path


def agent(kernel: KernelSession, calls: list[tuple[str, dict]], options: str = "--allow-writes") -> tuple[Cell, float]:
    """Run a %%agent cell whose scripted model makes ``calls`` (one round each); the cell and its seconds."""
    script = ", ".join(f"Call({name!r}, {arguments!r})" for name, arguments in calls)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    started = time.monotonic()
    cell = kernel.run(f"%%agent -m m {options}\ngo", timeout=30)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    return cell, time.monotonic() - started


def test_read_notebook_reads_the_saved_file_named_by_session_and_says_so(kernel: KernelSession, tmp_path: Path):
    path = saved_notebook(tmp_path / "rain.ipynb")
    kernel.ok(f"__session__ = {str(path)!r}")
    agent(kernel, [("read_notebook", {}), ("read_notebook", {"start": 1, "count": 1})])
    first, second = kernel.value("outputs()")
    intro, *cells = first.split("\n--- ")
    note, head = intro.split("\n")
    assert note.startswith("[no notebook extension answers here (") and "add_cell queues cells" in note
    assert "as last saved: this is the file on disk, so edits since the last save are not seen · 3 cells" in head
    assert cells[0] == "cell 0 · markdown · id intro\n# Rain study\nWhere does it rain most?"
    assert cells[1].startswith("cell 1 · code · id load · In [1]\nrain = {'Oslo': 3, 'Lima': 0}\nrain\n··· outputs:\n")
    assert cells[2].startswith("cell 2 · code · id broken · In [2] · its outputs hold an error")
    assert "ZeroDivisionError: division by zero" in cells[2]
    assert not second.startswith("[no notebook")  # said once per run
    assert "--- cell 1 · code · id load" in second and "id intro" not in second and "id broken" not in second
    assert "[cells 2-2 not shown: read_notebook(start=2)]" in second


def test_read_notebook_without_a_notebook_says_so_and_shows_the_input_history(kernel: KernelSession):
    kernel.ok("a = 6")
    kernel.ok("a * 7")
    agent(kernel, [("read_notebook", {"count": 3})])
    (text,) = kernel.value("outputs()")
    note, history = text.split("The kernel's input history instead:\n")
    assert "no notebook is known: no front end answered and none named a saved .ipynb" in note
    n = int(history.split("]")[0].removeprefix("In ["))
    assert history == (f"In [{n}]:\na = 6\nIn [{n + 1}]:\na * 7\nOut[{n + 1}]:\n42\n"
                       f"In [{n + 2}]:\nm = ScriptedModel([Call('read_notebook', {{'count': 3}}), 'done'])")


def test_add_cell_queues_cells_for_one_set_next_input_payload_with_the_cells_code(kernel: KernelSession):
    cell, _ = agent(kernel, [("add_cell", {"source": "## Findings\n\nOslo is wettest.", "cell_type": "markdown"}),
                             ("add_cell", {"source": "wettest = max(rain, key=rain.get)\n"}),
                             ("run_python", {"code": "rain = {'Oslo': 3}"})], "--allow-writes --cells")
    first, second, _ = kernel.value("outputs()")
    assert first.startswith("[no notebook extension answers here")
    assert "queued, not added yet" in first and "the queued cells (1 so far) become ONE new code cell" in first
    assert "the queued cells (2 so far) become ONE new code cell" in second and not second.startswith("[no notebook")
    payloads = cell.reply["content"]["payload"]
    assert [p["source"] for p in payloads] == ["set_next_input"]  # one payload for the queued cells and --cells
    assert payloads[0]["text"] == ("# ## Findings\n#\n# Oslo is wettest.\n\nwettest = max(rain, key=rain.get)\n\n"
                                   "rain = {'Oslo': 3}")  # Markdown as comments, then the code --cells keeps
    assert payloads[0]["replace"] is False


def test_edit_cell_is_refused_saying_this_front_end_cannot_edit(kernel: KernelSession, tmp_path: Path):
    kernel.ok(f"__session__ = {str(saved_notebook(tmp_path / 'rain.ipynb'))!r}")
    cell, _ = agent(kernel, [("read_notebook", {}), ("edit_cell", {"cell_id": "load", "source": "rain = {}"})])
    _, refused = kernel.value("outputs()")
    assert refused.startswith("error: CellNotWritten: not edited: this front end cannot edit cells (only "
                              "JupyterLab and Notebook 7 with agentkernel's extension can)")
    assert not cell.reply["content"]["payload"]
    assert nbformat.read(tmp_path / "rain.ipynb", 4).cells[1].source == "rain = {'Oslo': 3, 'Lima': 0}\nrain"


def test_no_extension_costs_one_hello_timeout_per_kernel_session_at_most(kernel: KernelSession):
    kernel.ok("get_ipython()._agentkernel_notebook = None")  # as a fresh kernel: nothing known of its front end
    _, first = agent(kernel, [("read_notebook", {}), ("add_cell", {"source": "x = 1"}),
                              ("edit_cell", {"cell_id": "x", "source": "y"})])
    assert HELLO_TIMEOUT <= first < HELLO_TIMEOUT + MARGIN  # one hello a run, however many notebook calls
    _, second = agent(kernel, [("read_notebook", {}), ("add_cell", {"source": "x = 1"})])
    assert second < MARGIN  # the next run knows: no wait
    assert kernel.value("outputs()")[0].startswith("[no notebook extension answers here (no notebook front end "
                                                   f"answered in {HELLO_TIMEOUT:g} s)")  # and still says so


def test_a_run_without_notebook_calls_never_says_hello(kernel: KernelSession):
    kernel.ok("get_ipython()._agentkernel_notebook = None")
    # --no-instructions: a cell sent with its cellId (as here, and by VS Code) reads the notebook's tagged
    # instruction cells live, which says hello (once per client session where no extension answers).
    cell, seconds = agent(kernel, [("list_variables", {})], "--allow-writes --no-instructions")
    assert seconds < MARGIN
    assert not [m for m in cell.of_type("comm_open") if m["content"]["target_name"] == "agentkernel.notebook"]


NOTEBOOK_CELLS = [
    "%load_ext agentkernel\nfrom agentkernel import Call, ScriptedModel\n"
    "m = ScriptedModel([Call('read_notebook'), Call('add_cell', {'source': 'total = 2'}), 'done'])",
    "%%agent -m m --allow-writes\nWhat is in this notebook?",
    "print(_agent.history[2]['output'])\nprint(_agent.history[4]['output'])",
]


def test_nbclient_run_reads_its_own_saved_notebook_and_never_hangs(tmp_path: Path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# The saved notes\nA cell above the agent.", id="notes"),
                      *(nbformat.v4.new_code_cell(source, id=f"c{i}") for i, source in enumerate(NOTEBOOK_CELLS))]
    path = tmp_path / "job.ipynb"
    nbformat.write(notebook, path)
    started = time.monotonic()
    client = NotebookClient(notebook, timeout=60, resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=kernel_env(tmp_path, JPY_SESSION_NAME=str(path)))  # what Jupyter's server gives a kernel
    assert time.monotonic() - started < 30
    printed = "".join(o.get("text", "") for o in notebook.cells[3].outputs if o.output_type == "stream")
    assert "notebook job.ipynb as last saved" in printed and "# The saved notes\nA cell above the agent." in printed
    assert "THIS CELL: the %%agent cell running now" in printed  # found by its source in the saved file
    assert "queued, not added yet" in printed


def test_a_cell_that_does_not_await_uses_the_fallbacks_at_once(kernel: KernelSession):
    kernel.ok("%autoawait False")
    cell, seconds = agent(kernel, [("add_cell", {"source": "x = 1"})])
    assert seconds < MARGIN  # no hello: the front end's answers could not arrive while the cell blocks
    (text,) = kernel.value("outputs()")
    assert text.startswith("[no notebook extension answers here (the cell does not await (%autoawait is off)")
    assert [p["text"] for p in cell.reply["content"]["payload"]] == ["x = 1"]
