"""The input transformer that turns a ``%%agent`` cell into a top-level ``await``.

IPython cell magics cannot be async, and only an awaiting cell lets ipykernel handle the Stop button's click
while the cell runs. So before IPython's own transforms see the cell, this one rewrites

    %%agent --max-iterations 5
    Summarize README.md

into ``await get_ipython().magics_manager.registry['AgentMagics'].run_async('--max-iterations 5', '...')``.
A one-line ``%agent prompt`` cell is rewritten the same way, and so is a cell holding only
``%agent_mcp ...`` or ``%agent_serve ...``.
With autoawait off nothing is rewritten and the magic runs in its worker-thread fallback.
"""

from __future__ import annotations

import re

from IPython import get_ipython

_CELL = re.compile(r"^%%agent(?:\s+(?P<line>.*))?$")
_LINE = re.compile(r"^%agent\s+(?P<line>.*\S)$")
_HELP = re.compile(r"^%%?agent\s*\?{1,2}$")
_MCP = re.compile(r"^%agent_mcp(?:\s+(?P<line>.*\S))?$")
_SERVE = re.compile(r"^%agent_serve(?:\s+(?P<line>.*\S))?$")


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
    mcp = _MCP.match(head.strip())
    if mcp and not body.strip():  # %agent_mcp alone: awaited, so that it can start and stop servers
        line = mcp.group("line") or ""
        return [f"await get_ipython().magics_manager.registry['AgentMagics'].agent_mcp_async({line!r})\n"]
    serve = _SERVE.match(head.strip())
    if serve and not body.strip():  # %agent_serve alone: awaited, so that its server starts on the kernel's loop
        line = serve.group("line") or ""
        return [f"await get_ipython().magics_manager.registry['AgentMagics'].agent_serve_async({line!r})\n"]
    cell = _CELL.match(head.rstrip())
    if cell:
        line, text = cell.group("line") or "", body
    else:
        one = _LINE.match(head.rstrip())
        if not one or body.strip():
            return lines
        line, text = one.group("line"), None
    call = f"get_ipython().magics_manager.registry['AgentMagics'].run_async({line!r}, {text!r})"
    return [f"await {call}\n"]


# IPython's check_complete (the terminal's "is this cell done?", ipykernel's is_complete_request) skips transforms
# marked so; it then sees ``%%agent`` as a cell magic and waits for the body, as it does for ``%%timeit``.
rewrite_agent_cell.has_side_effects = True  # type: ignore[attr-defined]
