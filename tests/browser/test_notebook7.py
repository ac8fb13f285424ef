"""``%%agent`` in Jupyter Notebook 7 (the ``notebook`` package) and Chromium: Stop, a tool call's section,
approve for the run, deny with a note.

Notebook 7 is built from JupyterLab's components but is its own application (one notebook per page, its own
shell and toolbar), so what JupyterLab shows is checked here again with the same flows. Run with
``python -m pytest -m browser tests/browser/test_notebook7.py``; screenshots go to artifacts/browser/ (``nb7-*``).
"""

from __future__ import annotations

from collections.abc import Callable

import flows
import pytest
from lab import MEASUREMENTS, LabServer, NotebookPage, write_notebook

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = pytest.mark.browser

FRONT_END = "notebook"  # conftest's lab_server starts `jupyter notebook` for this module

OpenNotebook = Callable[[str], NotebookPage]


@pytest.fixture(scope="module", autouse=True)
def notebooks(lab_server: LabServer) -> None:
    for name, cells in flows.NOTEBOOKS.items():
        write_notebook(lab_server.root / name, cells)
    (lab_server.root / "notes.txt").write_text(flows.NOTES)


def test_stop_button_aborts_the_run_within_a_second(open_notebook: OpenNotebook) -> None:
    latency = flows.stop(open_notebook("stop.ipynb"), "nb7-stop")
    MEASUREMENTS.append(f"Stop button in Notebook 7: {latency}")


def test_tool_call_section_expands_to_arguments_and_output(open_notebook: OpenNotebook) -> None:
    flows.expand_section(open_notebook("calls.ipynb"), "nb7-calls")


def test_approve_for_the_run_skips_later_asks_but_not_in_the_next_cell(open_notebook: OpenNotebook) -> None:
    flows.approve_for_run(open_notebook("approve_for_run.ipynb"), "nb7-approve-for-run")


def test_deny_with_a_note_reaches_the_model(open_notebook: OpenNotebook) -> None:
    flows.deny_with_note(open_notebook("deny_with_note.ipynb"), "nb7-deny-with-note")


def test_background_runs_are_approved_and_stopped_in_their_own_cells_while_other_cells_run(
        open_notebook: OpenNotebook, lab_server: LabServer) -> None:
    nb = open_notebook("background.ipynb")
    flows.background(nb, "nb7-background", lab_server.root / "background.ipynb")
    nb.close()
    reopened = open_notebook("background.ipynb")  # the saved records, each in its own cell
    expect(reopened.record(1)).to_contain_text("Approved and ran.")
    expect(reopened.record(2)).to_contain_text("aborted")
    expect(reopened.widget_views(1)).to_have_count(0)
    reopened.shot("nb7-background-3-reopened", 1)
