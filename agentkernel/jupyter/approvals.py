"""Who answers a side-effecting call's approval in a ``%%agent`` cell, and what a denial nobody decided says.

The panel asks in a widget front end (JupyterLab, Notebook 7, VS Code). Terminal IPython and consoles
(``jupyter console``) have no widgets: the question is asked on the terminal (:func:`terminal_approver`, through
``input()``). Where nobody can answer (``CI``,
``AGENTKERNEL_NONINTERACTIVE``, or a kernel run by nbclient, papermill or nbconvert: :func:`headless_runner`) a
call is denied at once, and the denial says why and what to pass instead (:func:`nobody_approver`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..stop import StopSignal
from ..text import hidden_warning, pretty_arguments, reveal
from ..tools import Decision, Tool, ToolCall

QUESTION = "{waiting} · Approve {name}? [y]es / [a]ll this run / [n]o / note: "
"""The terminal's question; ``{waiting}`` is filled with the record's word for it, so that the terminal says that
the run waits as the panel's status line does."""


def is_terminal(shell: Any) -> bool:
    """Whether ``shell`` is terminal IPython's (no widget front end, a person at a terminal)."""
    module = sys.modules.get("IPython.terminal.interactiveshell")  # loaded only when the terminal runs
    return module is not None and isinstance(shell, module.TerminalInteractiveShell)


def headless_runner(shell: Any) -> str | None:
    """Why no front end can answer in this kernel, or None: the cell was sent by nbclient (which papermill and
    ``jupyter nbconvert --execute`` use) rather than by a notebook front end.

    The signal is the execute request itself: nbclient sends ``allow_stdin: false`` and no cell metadata, while
    JupyterLab, Notebook 7 and VS Code allow ``input()`` and send the cell's id (``cellId``) with every request.
    """
    request = execute_request(shell)
    if request is None or request[0].get("allow_stdin", True) or "cellId" in request[1]:
        return None
    return "this kernel is run without a front end (nbclient, papermill or nbconvert: no input, no widgets)"


def asks_on_terminal(shell: Any) -> bool:
    """Whether a person answers at a terminal, not in a panel: terminal IPython, or a kernel cell sent by a console
    (``jupyter console``, qtconsole), which answers ``input()`` (``allow_stdin: true``) but sends no cell id and
    shows no widgets."""
    if is_terminal(shell):
        return True
    request = execute_request(shell)
    return request is not None and request[0].get("allow_stdin", True) is True and "cellId" not in request[1]


def execute_request(shell: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The content and metadata of the execute request running now in ``shell``'s kernel; None outside a kernel."""
    get_parent = getattr(getattr(shell, "kernel", None), "get_parent", None)
    if get_parent is None:  # not an ipykernel (terminal IPython, a plain InteractiveShell)
        return None
    request = get_parent() or {}
    if request.get("msg_type") != "execute_request":
        return None
    return request.get("content") or {}, request.get("metadata") or {}


def nobody_approver(where: str, untrusted: dict[str, str]) -> Callable[[ToolCall, Tool], Decision]:
    """Deny every side-effecting call at once, saying ``where`` nobody can approve it and the way out.

    ``untrusted`` maps the tools of MCP servers whose annotations are not trusted to their server: such a tool may
    well be read-only, and the way out is the server's ``"trustAnnotations"``.
    """

    def deny(call: ToolCall, tool: Tool) -> Decision:
        server = untrusted.get(tool.name)
        if server is not None:
            return Decision(False, by="headless",
                            asked=f"may have side effects: MCP server {server!r}'s annotations are not trusted",
                            reason=(f"nobody can approve it: {where}. Each tool of an untrusted server asks; set "
                                    f'"trustAnnotations": true in its entry of the MCP configuration to run the tools '
                                    "it annotates read-only unasked, or pass --allow-writes to run every tool unasked"))
        return Decision(False, reason=f"nobody can approve it: {where}; pass --allow-writes to run it unasked",
                        by="headless")

    return deny


def terminal_approver(stop: StopSignal) -> Callable[[ToolCall, Tool], Decision]:
    """Ask on the terminal: ``y`` approves, ``a`` approves the tool for the rest of the run, ``n`` (or nothing)
    denies, any other text denies with that text as the note the model reads; Ctrl-C (or end of input) denies and
    stops the run."""
    from ..listeners.timeline import WAITING  # the record's modules come with the first run, not with %load_ext

    def ask(call: ToolCall, tool: Tool) -> Decision:
        shown, hidden = reveal(terminal_arguments(call.arguments))
        print(f"\n{call.name} has side effects; its arguments:\n{shown}", flush=True)
        if hidden:
            print(f"WARNING: {hidden_warning(hidden, 'call')}", flush=True)
        try:
            with interruptible():
                answer = input(QUESTION.format(waiting=WAITING, name=call.name)).strip()
        except (KeyboardInterrupt, EOFError):
            print("\ndenied: the run is stopped", flush=True)
            stop.set("interrupted at an approval")
            return Decision(False, reason="the run was stopped at its approval")
        if answer.lower() in ("y", "yes"):
            return Decision(True)
        if answer.lower() in ("a", "all"):
            return Decision(True, for_run=True)
        if answer.lower() in ("", "n", "no"):
            return Decision(False)
        return Decision(False, note=answer)

    return ask


CODE_ARGUMENTS = ("code", "source")
"""Arguments that hold code (``run_python``'s ``code``, a cell's ``source``): shown as code even on one line."""


def terminal_arguments(arguments: str) -> str:
    """A call's arguments for the terminal: code (:data:`CODE_ARGUMENTS`) and any text of several lines as it
    reads, indented under its name, the other values as JSON; arguments that are not a JSON object as indented
    JSON."""
    try:
        values = json.loads(arguments)
    except (ValueError, RecursionError):
        values = None
    if not isinstance(values, dict):
        return pretty_arguments(arguments)
    lines = []
    for name, value in values.items():
        if isinstance(value, str) and (name in CODE_ARGUMENTS or "\n" in value.strip("\n")):
            lines += [f"{name}:", textwrap.indent(value.strip("\n"), "    ")]
        else:
            lines.append(f"{name}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here, whatever handler the run installed (which only sets the stop flag:
    ``input()`` would go on waiting)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def no_clicks_reason() -> str | None:
    """The environment that says nobody clicks (``CI``, ``AGENTKERNEL_NONINTERACTIVE``), as a reason; else None."""
    for name in ("AGENTKERNEL_NONINTERACTIVE", "CI"):
        if os.environ.get(name):
            return f"{name} is set, so nobody is asked"
    return None
