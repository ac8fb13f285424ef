"""The notebook runners teams use in CI, on a notebook whose ``%%agent`` cell stops on a guard.

papermill fails a run on any error output whatever the cell's tags (its ``raise_for_execution_errors``), so a guard
stop fails a papermill job, naming the stop; nbmake and ``jupyter nbconvert --execute`` fail on it too unless the
cell is tagged ``raises-exception``, as nbval does. scripts/test.sh also runs the whole course under nbmake and
nbconvert.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

papermill = pytest.importorskip("papermill")

JOB = Path(__file__).parents[1] / "jobs" / "guard_stop_job.ipynb"
AGENT_CELL = 3  # the job's %%agent cell (after a Markdown cell, the parameters and the setup)


def run_job(tmp_path: Path, **parameters: object) -> nbformat.NotebookNode:
    out = tmp_path / "out.ipynb"
    try:
        papermill.execute_notebook(str(JOB), str(out), parameters=parameters, cwd=str(tmp_path), progress_bar=False)
    finally:
        assert out.exists()  # papermill saves the executed notebook, failed or not
    return nbformat.read(out, as_version=4)


def stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def test_papermill_fails_the_job_on_a_guard_stop_naming_the_stop(tmp_path: Path):
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        run_job(tmp_path, loop=True)
    error = raised.value
    assert error.ename == "RepeatedToolCall"
    assert error.evalue.startswith("REPEATED_TOOL_CALL: list_dir")
    assert error.cell_index == AGENT_CELL + 1  # papermill inserts its injected-parameters cell before ours
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[-1].execution_count is None  # the job stopped there


def test_papermill_passes_the_job_that_completes(tmp_path: Path):
    executed = run_job(tmp_path, loop=False)
    assert stdout(executed.cells[-1]) == "job finished: complete\n"


def tagged_job(tmp_path: Path, tagged: bool) -> Path:
    """The job with ``loop = True`` (a guard stop), its %%agent cell tagged raises-exception or not."""
    nb = nbformat.read(JOB, as_version=4)
    if tagged:
        nb.cells[AGENT_CELL].metadata["tags"] = ["raises-exception"]
    path = tmp_path / f"{'tagged' if tagged else 'untagged'}.ipynb"
    nbformat.write(nb, path)
    return path


def test_papermill_fails_on_a_guard_stop_even_in_a_raises_exception_cell(tmp_path: Path):
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        papermill.execute_notebook(str(tagged_job(tmp_path, tagged=True)), str(tmp_path / "out.ipynb"),
                                   cwd=str(tmp_path), progress_bar=False)
    assert raised.value.ename == "RepeatedToolCall"


def test_nbmake_honours_raises_exception(tmp_path: Path):
    tagged, untagged = tagged_job(tmp_path, tagged=True), tagged_job(tmp_path, tagged=False)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbmake",
                             tagged.name, untagged.name], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout, result.stdout
    assert f"FAILED {untagged.name}" in result.stdout and "RepeatedToolCall" in result.stdout


def test_nbconvert_execute_honours_raises_exception(tmp_path: Path):
    tagged, untagged = tagged_job(tmp_path, tagged=True), tagged_job(tmp_path, tagged=False)
    executed = tmp_path / "executed"
    result = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--output-dir",
                             str(executed), tagged.name, untagged.name], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "CellExecutionError" in result.stderr and "REPEATED_TOOL_CALL: list_dir" in result.stderr, result.stderr
    assert not (executed / untagged.name).exists()
    # The tagged notebook ran to its end, the cell after the guard stop included.
    assert stdout(nbformat.read(executed / tagged.name, as_version=4).cells[-1]) == "job finished: repeated_tool_call\n"
