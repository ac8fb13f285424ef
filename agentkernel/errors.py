"""The errors the package raises for the user to read: a configuration that cannot work, said plainly.

They live in the core (not in the Jupyter layer) so that the core's own configuration, such as MCP servers'
(:mod:`agentkernel.mcp`), can raise them; a notebook cell shows them without a stack trace.
"""

from __future__ import annotations


def describe_error(error: BaseException) -> str:
    """An error in one line, ``Type: message`` (the type alone when the message is empty): the first error inside an
    exception group (anyio's task groups wrap what failed), and a ``SystemExit`` named for what it tried."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}): the tool tried to end the process"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class AgentError(Exception):
    """Base of the errors a cell shows; IPython renders ``_render_traceback_`` instead of a stack trace."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class AgentConfigError(AgentError):
    """The cell cannot run as configured (no model, unknown tool, bad value); the message says how to fix it."""
