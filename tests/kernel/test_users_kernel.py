"""The kernels the tests start are the kernels users run.

ipykernel forwards what the process writes to its file descriptors 1 and 2 (a subprocess, ``os.write``, a C
extension) into the running cell, unless ``PYTEST_CURRENT_TEST`` is in its environment; pytest sets it around every
test, so without ``tests/harness/users_kernels.py`` every kernel a test starts hides that output and the tests see a
kernel no user runs. These tests fail if the harness regresses: a kernel started as the tests start them
(jupyter_client, nbclient, a pytest started by a test) must show both writes in the cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
from kernel_client import KernelSession, kernel_env

VARIABLE = "PYTEST_CURRENT_TEST"
WRITES = ("import os, subprocess\n"
          "os.write(2, b'fd two from the kernel\\n')\n"
          "subprocess.run(['echo', 'echo from a child'], check=True)")


def test_pytest_puts_no_variable_in_the_environment_children_inherit() -> None:
    assert VARIABLE not in os.environ
    child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({VARIABLE!r}))"],
                           capture_output=True, text=True, check=True)
    assert child.stdout == "None\n"


def test_a_jupyter_client_kernel_forwards_file_descriptor_writes_into_the_cell(tmp_path: Path) -> None:
    kernel = KernelSession(tmp_path, kernel_env(tmp_path))
    try:
        kernel.ok("import os")
        assert kernel.value(f"os.environ.get({VARIABLE!r})") is None
        cell = kernel.ok(WRITES)
    finally:
        kernel.shutdown()
    assert "fd two from the kernel" in cell.stderr, cell.describe()
    assert "echo from a child" in cell.stdout, cell.describe()


def test_the_contrast_a_kernel_given_the_variable_hides_them(tmp_path: Path) -> None:
    """What the harness prevents (and what makes the tests above fail if it regresses)."""
    kernel = KernelSession(tmp_path, kernel_env(tmp_path, **{VARIABLE: "a test (call)"}))
    try:
        cell = kernel.ok(WRITES)
    finally:
        kernel.shutdown()
    assert "fd two" not in cell.stderr and "echo from a child" not in cell.stdout, cell.describe()


def notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WRITES)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def streams(nb: nbformat.NotebookNode) -> dict[str, str]:
    found: dict[str, str] = {}
    for output in nb.cells[0].outputs:
        if output.output_type == "stream":
            found[output.name] = found.get(output.name, "") + output.text
    return found


def test_an_nbclient_kernel_forwards_them_too(tmp_path: Path) -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(notebook(tmp_path / "writes.ipynb"), as_version=4)
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute(
        env=kernel_env(tmp_path))
    found = streams(nb)
    assert "fd two from the kernel" in found.get("stderr", ""), found
    assert "echo from a child" in found.get("stdout", ""), found


def test_a_pytest_started_by_a_test_runs_its_kernels_without_the_variable_too(tmp_path: Path) -> None:
    """nbval and nbmake over a notebook in a temporary folder (the repository's conftest.py is not theirs)."""
    notebook(tmp_path / "writes.ipynb")
    check = tmp_path / "test_child.py"
    check.write_text("import os, subprocess, sys\n\n\ndef test_child():\n"
                     f"    assert {VARIABLE!r} not in os.environ\n"
                     "    out = subprocess.run([sys.executable, '-m', 'jupyter', 'nbconvert', '--to', 'notebook', "
                     "'--execute', '--stdout', 'writes.ipynb'], capture_output=True, text=True, check=True).stdout\n"
                     "    assert 'fd two from the kernel' in out and 'echo from a child' in out, out\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", check.name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
