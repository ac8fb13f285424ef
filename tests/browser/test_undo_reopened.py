"""The record's Undo button on a reopened notebook (issue 40), in JupyterLab and Notebook 7 with agentkernel's
extension and Chromium: the saved notebook holds a run's Undo output, and its kernel is a new one. Clicked before
``%load_ext agentkernel``, the button says in one line that this kernel has no record of the run (not IPython's
``UsageError: Line magic function `%agent_undo` not found``); after it, the kernel's own line says the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import nbformat
import pytest
from lab import LabServer, NotebookPage

from agentkernel.jupyter.kernel.undo import UNDO_MIME

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("lab_server", ["lab", "notebook"], indirect=True, scope="module"),
]

RUN_ID = "3f2a9c1b7e4d"
BUTTON = re.compile(r"^Undo this run")


def saved_run(lab_server: LabServer, name: str) -> None:
    """A notebook as a run that changed two cells left it, saved: its Undo output below the agent's cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    agent = nbformat.v4.new_code_cell("%%agent -m m\nAdd a total.", execution_count=3)
    agent.outputs = [nbformat.v4.new_output("display_data", data={
        UNDO_MIME: {"run_id": RUN_ID, "cells": 2},
        "text/plain": f"this run changed 2 cells: 2 added; %agent_undo {RUN_ID} takes it back while this kernel runs"})]
    nb.cells = [agent, nbformat.v4.new_code_cell("%load_ext agentkernel")]
    nbformat.write(nb, lab_server.root / name)


def test_undo_on_a_reopened_notebook_says_in_one_line_why_it_cannot(
        open_notebook: Callable[[str], NotebookPage], lab_server: LabServer) -> None:
    saved_run(lab_server, "reopened.ipynb")
    nb = open_notebook("reopened.ipynb")
    button = nb.output(0).get_by_role("button", name=BUTTON)
    line = nb.output(0).locator(".jp-agentkernel-undo-line")
    expect(line).to_have_text(f"run {RUN_ID} changed 2 cells")

    button.click()  # the kernel has not loaded agentkernel: the magic is not there
    expect(line).not_to_have_text(re.compile(r"^(run |undoing)"), timeout=30_000)
    said = line.inner_text()
    assert said == (f"cannot undo run {RUN_ID}: this kernel has no record of it (agentkernel is not loaded here: the "
                    "kernel was restarted since the run, and a new kernel cannot take back an old run; "
                    "%load_ext agentkernel loads it for new runs)"), said
    assert "UsageError" not in said and "\n" not in said
    expect(button).to_be_enabled()

    nb.run_and_wait(1)  # %load_ext agentkernel: now the kernel answers itself
    button.click()
    expect(line).to_have_text(re.compile(rf"^nothing to undo: run {RUN_ID} did not change the notebook from this "
                                         r"kernel \(a restarted kernel forgets its runs"), timeout=30_000)
