"""The committed notebooks stay small and machine-independent: no stored widget state, no timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_holds_no_widget_state_or_timings(path: Path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in notebook["metadata"], "run scripts/run_notebooks.sh, which does not store widget state"
    for cell in notebook["cells"]:
        assert "execution" not in cell.get("metadata", {}), f"timings stored in a cell of {path.name}"
