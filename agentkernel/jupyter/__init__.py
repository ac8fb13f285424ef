"""The notebook front end: the ``%%agent`` magic, its panel, and its errors. Imported only by ``%load_ext``."""

from __future__ import annotations

from ..distribution import foreign_distribution
from .approvals import is_terminal
from .errors import STOP_ERRORS, AgentConfigError, AgentError, AgentStop
from .kernel import KERNEL_TOOL_NAMES
from .magics import AgentMagics, register
from .transform import complete_on_empty_line, rewrite_agent_cell

__all__ = ["KERNEL_TOOL_NAMES", "STOP_ERRORS", "AgentConfigError", "AgentError", "AgentMagics", "AgentStop",
           "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython) -> None:  # noqa: ANN001
    if clash := foreign_distribution():
        print(clash)
    register(ipython)
    if rewrite_agent_cell not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.insert(0, rewrite_agent_cell)
    if is_terminal(ipython) and not hasattr(ipython.check_complete, "wraps"):
        ipython.check_complete = complete_on_empty_line(ipython.check_complete)


def unload_ipython_extension(ipython) -> None:  # noqa: ANN001
    if rewrite_agent_cell in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(rewrite_agent_cell)
    if hasattr(ipython.check_complete, "wraps"):
        ipython.check_complete = ipython.check_complete.wraps
