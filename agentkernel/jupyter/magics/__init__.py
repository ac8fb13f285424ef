"""The magics, one ``Magics`` class per concern as IPython's own ``core/magics/`` are: ``%%agent`` / ``%agent``
(:class:`AgentMagics`, which also holds every option's ``%config`` trait), ``%agent_serve``, ``%agent_mcp``,
``%agent_undo``, ``%agent_secret`` and ``%agent_policy``. Each parses its line and hands off to plain functions
(:mod:`agentkernel.jupyter.cell`, :mod:`agentkernel.jupyter.serve`...) that take the kernel's shared state
(:class:`~agentkernel.jupyter.kernel_state.KernelState`).
"""

from __future__ import annotations

from typing import Any

from .agent import AgentMagics
from .background import BackgroundMagics
from .mcp import MCPMagics
from .policy import PolicyMagics
from .secret import SecretMagics
from .serve import ServeMagics
from .undo import UndoMagics

__all__ = ["AgentMagics", "BackgroundMagics", "MCPMagics", "PolicyMagics", "SecretMagics", "ServeMagics",
           "UndoMagics", "register"]


def register(shell: Any) -> AgentMagics:
    """Register every agentkernel magic with ``shell``, all sharing one kernel state; the ``AgentMagics``."""
    agent = AgentMagics(shell)
    shell.register_magics(agent, *(kind(shell, agent.state) for kind in (ServeMagics, MCPMagics, UndoMagics,
                                                                          SecretMagics, PolicyMagics,
                                                                          BackgroundMagics)))
    return agent
