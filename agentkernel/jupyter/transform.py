"""The input transformer that turns a ``%%agent`` cell into a top-level ``await``.

IPython cell magics cannot be async, and only an awaiting cell lets ipykernel handle the Stop button's click
while the cell runs. So before IPython's own transforms see the cell, this one rewrites

    %%agent --max-iterations 5
    Summarize README.md

into ``await get_ipython().magics_manager.registry['AgentMagics'].awaited('agent', '--max-iterations 5', '...')``.
A one-line ``%agent prompt`` cell is rewritten the same way, and so is a cell holding only ``%agent_mcp ...``,
``%agent_serve ...``, ``%agent_undo ...`` or ``%agent_wait ...`` (they wait for MCP servers, a server's start, the
notebook's front end or background runs).
With autoawait off nothing is rewritten and the magic runs in its worker-thread fallback.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from IPython import get_ipython

_CELL = re.compile(r"^%%agent(?:\s+(?P<line>.*))?$")
_LINE = re.compile(r"^%agent\s+(?P<line>.*\S)$")
_HELP = re.compile(r"^%%?agent\s*\?{1,2}$")
_AWAITED = re.compile(r"^%(?P<magic>agent_mcp|agent_serve|agent_undo|agent_wait)(?:\s+(?P<line>.*\S))?$")


def rewrite_agent_cell(lines: list[str]) -> list[str]:
    """IPython ``input_transformers_cleanup`` hook: rewrite ``%%agent`` / one-line ``%agent`` cells."""
    shell = get_ipython()
    if shell is None or not shell.autoawait:
        return lines
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return lines
    head = lines[first].rstrip("\n")
    body = "".join(lines[first + 1:])
    if _HELP.match(head.strip()):  # %%agent? asks for help: leave it to IPython
        return lines
    awaited = _AWAITED.match(head.strip())
    if awaited and not body.strip():  # %agent_mcp, _serve, _undo or _wait alone: awaited, so that it can wait
        return [awaiting(awaited.group("magic"), awaited.group("line") or "", None)]
    cell = _CELL.match(head.rstrip())
    if cell:
        return [awaiting("agent", cell.group("line") or "", body)]
    one = _LINE.match(head.rstrip())
    if not one or body.strip():
        return lines
    return [awaiting("agent", one.group("line"), None)]


def awaiting(magic: str, line: str, cell: str | None) -> str:
    """The one line a rewritten cell holds: an ``await`` of the magic's awaited form (:meth:`AgentMagics.awaited`)."""
    return f"await get_ipython().magics_manager.registry['AgentMagics'].awaited({magic!r}, {line!r}, {cell!r})\n"


# IPython's check_complete (the terminal's "is this cell done?", ipykernel's is_complete_request) skips transforms
# marked so; it then sees ``%%agent`` as a cell magic and waits for the body, as it does for ``%%timeit``.
rewrite_agent_cell.has_side_effects = True  # type: ignore[attr-defined]


def complete_on_empty_line(check: Callable[[str], tuple[str, Any]]) -> Callable[[str], tuple[str, Any]]:
    """Terminal IPython's "is this cell done?" (``shell.check_complete``, asked at each Enter), with a typed
    ``%%agent`` cell done at Enter on the empty line under its prompt. IPython's own check finds a cell magic done
    only when its text ends in a blank line, which the Enter on the first empty line does not yet make, so a second
    Enter was needed. Any other cell is left to ``check``."""

    def check_complete(code: str) -> tuple[str, Any]:
        head, newline, body = code.lstrip("\n").partition("\n")
        if _CELL.match(head.rstrip()) and newline and body.strip() and code.endswith("\n"):
            return "complete", None  # Enter on the empty line under the prompt: run it
        return check(code)

    check_complete.wraps = check  # type: ignore[attr-defined]
    return check_complete
