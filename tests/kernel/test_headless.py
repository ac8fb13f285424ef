"""A notebook run with no front end (nbclient, papermill, ``jupyter nbconvert --execute``) and without ``CI`` set:
a side-effecting call is denied at once, saying why and what to pass, instead of waiting
``approval_timeout`` (300 s) per call; a front end's request (``allow_stdin``, a ``cellId``) still asks, and a
console's (``allow_stdin`` and no ``cellId``) asks through ``input()``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from kernel_client import Cell, KernelSession, button_description, kernel_fixtures

ROOT = Path(__file__).resolve().parents[2]
DENIAL = ("denied: write_note has side effects and nobody can approve it: this kernel is run without a front end "
          "(nbclient, papermill or nbconvert: no input, no widgets); pass --allow-writes to run it unasked")
BOUND = 60.0  # seconds for a whole run (it waited 300 s per call)

CELLS = [
    "%load_ext agentkernel\n%config AgentMagics.transcripts = False\nimport os\nos.environ.pop('CI', None)\n"
    "os.environ.pop('AGENTKERNEL_NONINTERACTIVE', None)",
    "from agentkernel import Call, ScriptedModel, tool\n\n"
    "@tool(read_only=False)\ndef write_note(text: str) -> str:\n    'Append a note.'\n    return 'written'\n\n"
    "m = ScriptedModel([Call('write_note', {'text': 'hi'}), 'done'])",
    "%%agent -m m --tools write_note\nwrite a note",
    "print('OUTPUT:', _agent.history[2]['output'])\nprint('DENIED:', _agent.denied_calls)",
]


@pytest.fixture
def notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's agentkernel
    monkeypatch.setenv("AGENTKERNEL_TRANSCRIPTS", str(tmp_path / "transcripts"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    for name in ("CI", "AGENTKERNEL_NONINTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    return path


def check(executed: nbformat.NotebookNode, seconds: float) -> None:
    assert seconds < BOUND, f"the run took {seconds:.1f} s"
    printed = "".join(o.get("text", "") for o in executed.cells[3].outputs)
    assert f"OUTPUT: {DENIAL}" in printed and "DENIED: 1" in printed, printed
    final = executed.cells[2].outputs[-1]["data"]["text/plain"]
    assert final.startswith("agent: complete · 2 rounds · 1 tool call · 1 call denied · "), final
    # the record shows the approval, decided by nobody (the runner's event, not a panel's row)
    assert "approval: write_note · denied: nobody can approve it: this kernel is run without" in final, final


def test_nbclient(notebook: Path):
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=BOUND, kernel_name="python3", resources={"metadata": {"path": str(notebook.parent)}}
                   ).execute()
    check(nb, time.monotonic() - start)


def test_papermill(notebook: Path):
    out = notebook.with_name("out.ipynb")
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "papermill", str(notebook), str(out), "-k", "python3",
                    "--execution-timeout", str(int(BOUND))], check=True, capture_output=True, timeout=BOUND * 2)
    check(nbformat.read(out, as_version=4), time.monotonic() - start)


def test_nbconvert(notebook: Path):
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                    f"--ExecutePreprocessor.timeout={int(BOUND)}", "--output", "converted.ipynb", str(notebook)],
                   check=True, capture_output=True, timeout=BOUND * 2)
    check(nbformat.read(notebook.with_name("converted.ipynb"), as_version=4), time.monotonic() - start)


# -- what a front end sends still asks --------------------------------------------------------------------------

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import os
os.environ.pop("CI", None)
from agentkernel import Call, ScriptedModel, tool

@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    return "written"

m = ScriptedModel([Call('write_note', {'text': 'hi'}), 'done'])
"""

session, kernel = kernel_fixtures("headless_kernel", SETUP)


def execute(kernel: KernelSession, code: str, allow_stdin: bool, metadata: dict) -> str:
    """Send an execute_request as a given front end does; its msg_id."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": allow_stdin, "stop_on_error": True}
    msg = kernel.kc.session.msg("execute_request", content, metadata=metadata)
    kernel.kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


@pytest.mark.parametrize(("front_end", "allow_stdin", "metadata"), [
    ("JupyterLab 4 and Notebook 7", True, {"cellId": "0a1b2c", "deletedCells": [], "recordTiming": False}),
    ("VS Code", True, {"cellId": "vscode-notebook-cell:/work/a.ipynb#W0sZmlsZQ=="}),
    ("a front end without stdin that names its cell", False, {"cellId": "0a1b2c"}),
])
def test_a_front_ends_request_still_asks(kernel: KernelSession, front_end: str, allow_stdin: bool, metadata: dict):
    cell = Cell(kernel, execute(kernel, "%%agent -m m --tools write_note\ngo", allow_stdin, metadata), "agent")
    approve = cell.wait_for_button("Approve")
    kernel.click(approve)
    cell.wait()
    assert cell.status == "ok", cell.describe()
    assert kernel.value("_agent.history[2]['output']") == "written", front_end


def test_nbclients_request_is_denied_at_once(kernel: KernelSession):
    start = time.monotonic()
    cell = Cell(kernel, execute(kernel, "%%agent -m m --tools write_note\ngo", False, {}), "agent").wait(BOUND)
    assert time.monotonic() - start < 10
    assert not [m for m in cell.messages if button_description(m) == "Approve"]
    assert kernel.value("_agent.history[2]['output']") == DENIAL
    assert kernel.value("_agent.denied_calls") == 1


@pytest.mark.parametrize("answer", ["y", "n"])
def test_a_consoles_request_asks_through_input(kernel: KernelSession, answer: str):
    """``jupyter console`` (jupyter_client's default request: ``allow_stdin`` and no ``cellId``) can answer
    ``input()`` but shows no widgets: the question comes as an ``input_request`` on the stdin
    channel, at once, and the answer decides. (tests/kernel/test_terminal.py drives jupyter console itself.)"""
    cell = Cell(kernel, execute(kernel, "%%agent -m m --tools write_note\ngo", True, {}), "agent")
    request = kernel.kc.get_stdin_msg(timeout=30)
    kernel.kc.input(answer)  # first: a kernel left waiting for it would fail every later test
    assert request["msg_type"] == "input_request"
    assert request["content"]["prompt"].endswith("Approve write_note? [y]es / [a]ll this run / [n]o / note: ")
    cell.wait()
    assert cell.status == "ok", cell.describe()
    assert not [m for m in cell.messages if button_description(m) == "Approve"]
    expected = "written" if answer == "y" else "denied: write_note has side effects and the user denied it"
    assert kernel.value("_agent.history[2]['output']") == expected
