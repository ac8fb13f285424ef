"""A pytest plugin: every kernel the tests start is the kernel users run.

pytest puts ``PYTEST_CURRENT_TEST`` into ``os.environ`` around each test (``_pytest.runner``), every child inherits
it, and ipykernel (``iostream.py``, "Pytest set its own capture") then stops capturing the process's file
descriptors: a subprocess's output, C-level writes and ``sys.__stderr__`` go to the kernel's log in tests and into
the cell for users. This plugin keeps the variable out of the environment altogether, so no kernel (jupyter_client,
nbclient, papermill, nbval, nbmake, nbconvert, the browser suite's Jupyter servers) can inherit it.

The repository's ``conftest.py`` loads it, and names it in ``PYTEST_PLUGINS`` (with this folder on ``PYTHONPATH``)
so that a pytest the tests start in a temporary folder (nbval, nbmake) loads it too. A test that starts pytest
therefore adds to ``PYTHONPATH`` and never replaces it: without this folder the child's pytest cannot import the
plugin ``PYTEST_PLUGINS`` names and stops ("No module named users_kernels").
``tests/kernel/test_users_kernel.py`` fails if any of this regresses.
"""

from __future__ import annotations

import os
from typing import Any

import _pytest.runner

VARIABLE = "PYTEST_CURRENT_TEST"

if not callable(getattr(_pytest.runner, "_update_current_test_var", None)):  # pragma: no cover
    raise RuntimeError("pytest no longer sets PYTEST_CURRENT_TEST through _pytest.runner._update_current_test_var: "
                       "tests/harness/users_kernels.py must keep it out of kernels another way")


def _keep_out(item: Any, when: str | None) -> None:
    """Stands in for pytest's: the variable is never set (and dropped if something else set it)."""
    os.environ.pop(VARIABLE, None)


_pytest.runner._update_current_test_var = _keep_out  # (looked up by pytest's hooks at each call)
os.environ.pop(VARIABLE, None)
