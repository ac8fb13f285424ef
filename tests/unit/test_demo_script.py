"""``scripts/demo.sh``: ``--lab ARGS`` hands ARGS to ``jupyter lab``, with ``--allow-root`` for root, and
the headless form runs the notebook named. ``python`` is a stand-in on ``PATH`` that prints its arguments, so neither
pip nor Jupyter runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def calls(tmp_path: Path):
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s|" "$@"; echo\n')
    fake.chmod(0o755)

    def demo(*args: str) -> list[list[str]]:
        path = f"{fake.parent}{os.pathsep}{os.environ['PATH']}"
        result = subprocess.run(["bash", REPO / "scripts" / "demo.sh", *args], capture_output=True, text=True,
                                timeout=30, env={**os.environ, "PATH": path})
        assert result.returncode == 0, result.stderr
        return [line.rstrip("|").split("|") for line in result.stdout.splitlines()]

    return demo


def test_lab_passes_its_arguments_to_jupyter_lab(calls):
    install, lab = calls("--lab", "--port", "8890", "--ServerApp.token=a b")
    assert install[:3] == ["-m", "pip", "install"] and install[-1] == ".[lab]"
    root = ["--allow-root"] if os.geteuid() == 0 else []
    assert lab == ["-m", "jupyter", "lab", "notebooks/", *root, "--port", "8890", "--ServerApp.token=a b"]


def test_without_lab_it_runs_the_notebook_named_or_the_first(calls):
    assert calls()[-1] == ["scripts/demo.py", "notebooks/01_no_round_cap.ipynb"]
    assert calls("notebooks/02_stop_conditions.ipynb")[-1][-1] == "notebooks/02_stop_conditions.ipynb"
