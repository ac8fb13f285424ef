"""What the front-end extension answers (its ``hello``, a notebook's cells from its ``read``), and the cells of the
saved ``.ipynb`` where no extension answers. Imported when a notebook tool is first used (pydantic).

The saved file is found through the names front ends leave in the user namespace: ``__session__`` (set by
ipykernel from ``JPY_SESSION_NAME``, which Jupyter's server gives a kernel it starts for a notebook) and VS Code's
``__vsc_ipynb_file__``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ...text import cut

SAVED_OUTPUT_CHARS = 2000  # as the extension's outputs_text


class FrontEnd(BaseModel):
    """The extension's ``hello`` answer."""

    front_end: str
    version: str = ""
    can_edit: bool = True
    path: str = ""
    """The notebook's path relative to the server root ("" from an extension older than 0.1.1)."""

    @property
    def label(self) -> str:
        return {"jupyterlab": "JupyterLab", "notebook7": "Notebook 7"}.get(self.front_end, self.front_end)


class Cell(BaseModel):
    """One cell, in the shape of the extension's ``read`` reply."""

    id: str
    cell_type: str
    source: str
    execution_count: int | None = None
    has_error: bool = False
    outputs_text: str = ""
    metadata_agentkernel: dict[str, Any] | None = None
    tags: list[str] = []
    """The cell's tags (``metadata.tags``), as nbformat has them."""


class Reading(BaseModel):
    """The notebook: its path, the active cell (live reads only) and its cells in order."""

    path: str = ""
    active_cell_id: str | None = None
    cells: list[Cell]


def saved_path(user_ns: dict[str, Any]) -> Path | None:
    """The saved notebook of this kernel, if a front end named one that exists."""
    for name in ("__vsc_ipynb_file__", "__session__"):
        value = user_ns.get(name)
        if not isinstance(value, str) or not value.endswith(".ipynb"):
            continue
        path = Path(value).expanduser()
        # __session__ is the notebook's path on the server: absolute, or relative to the server's root (which is
        # not always the kernel's working directory: then the name alone may still be found here).
        for candidate in (path, Path.cwd() / path, Path.cwd() / path.name):
            if candidate.is_file():
                return candidate
    return None


def read_saved(path: Path) -> Reading:
    """The cells of the saved ``.ipynb`` at ``path``; raise ValueError saying why it cannot be read."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = [_saved_cell(index, cell) for index, cell in enumerate(notebook["cells"])]
    except (OSError, UnicodeError, ValueError, KeyError, TypeError, ValidationError) as e:
        raise ValueError(f"cannot read the saved notebook {path}: {type(e).__name__}: {e}") from None
    return Reading(path=os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path), cells=cells)


def _saved_cell(index: int, cell: dict[str, Any]) -> Cell:
    outputs = cell.get("outputs") or []
    metadata = cell.get("metadata") or {}
    return Cell(
        id=str(cell.get("id") or f"#{index}"),  # nbformat < 4.5 has no ids: the position stands in
        cell_type=str(cell.get("cell_type", "code")),
        source=_joined(cell.get("source", "")),
        execution_count=cell.get("execution_count"),
        has_error=any(o.get("output_type") == "error" for o in outputs),
        outputs_text=cut("".join(_output_text(o) for o in outputs), SAVED_OUTPUT_CHARS),
        metadata_agentkernel=metadata.get("agentkernel") if isinstance(metadata.get("agentkernel"), dict) else None,
        tags=[str(tag) for tag in metadata.get("tags") or [] if isinstance(tag, str)]
        if isinstance(metadata.get("tags"), list) else [],
    )


def _output_text(output: dict[str, Any]) -> str:
    """As the extension's outputsText: stream text, text/plain of results and displays, ``ename: evalue``."""
    kind = output.get("output_type")
    if kind == "stream":
        return _joined(output.get("text", ""))
    if kind == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    plain = (output.get("data") or {}).get("text/plain")
    return _joined(plain) + "\n" if plain is not None else ""


def _joined(text: Any) -> str:
    return "".join(text) if isinstance(text, list) else str(text)
