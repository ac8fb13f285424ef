"""Loaded for every test path of the repository (``tests/`` and ``notebooks/``, whose nbval and nbmake runs start
kernels): the kernels the tests start run without ``PYTEST_CURRENT_TEST``, as users' kernels do
(``tests/harness/users_kernels.py`` says why)."""

import os
import sys
from pathlib import Path

HARNESS = str(Path(__file__).parent / "tests" / "harness")
sys.path.insert(0, HARNESS)
# A pytest started by a test (nbval or nbmake over a notebook in a temporary folder) loads the plugin too.
paths, plugins = os.environ.get("PYTHONPATH", ""), os.environ.get("PYTEST_PLUGINS", "")
if HARNESS not in paths.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HARNESS, paths]))
if "users_kernels" not in plugins.split(","):
    os.environ["PYTEST_PLUGINS"] = ",".join(filter(None, [plugins, "users_kernels"]))

pytest_plugins = ["users_kernels"]
