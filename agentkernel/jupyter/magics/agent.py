"""``%%agent`` and ``%agent``, and every option's ``%config AgentMagics`` trait.

The options, their traits and their help are declared once in :mod:`agentkernel.jupyter.options`. A ``%%agent`` cell
is rewritten by :func:`agentkernel.jupyter.transform.rewrite_agent_cell` into a top-level ``await`` of
:meth:`AgentMagics.awaited`, so the cell stays busy while the kernel still handles the Stop button's click
(ipykernel >= 7.4 dispatches comm messages while the shell awaits). With autoawait off the magic runs the loop in a
worker thread instead, and only the kernel interrupt can stop it. A cell's life is in :mod:`agentkernel.jupyter.cell`.
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..kernel_state import KernelState
from ..options import option_arguments, option_traits


@magics_class
class AgentMagics(Magics):
    """Run an agent loop inline in the kernel. Every option's default can be set with ``%config``."""

    locals().update(option_traits())  # model, api, max_iterations, ...: one traitlet per row of the options table
    expand: bool  # one of them, read before the options are merged

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell, **kwargs)
        self.state = KernelState(shell, self, self.agent.parser)
        """What this kernel's magics share; the other magics read these traits through it."""
        self.state.awaited["agent"] = self.run_cell

    @option_arguments
    @no_var_expand  # the magic expands the prompt itself (unless --no-expand), and never the options
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Run an LLM tool-use loop on the prompt, showing tool calls, streamed text and a Stop button.

        ``%%agent [options]`` takes the cell body as the prompt; ``%agent [options] prompt`` one line.
        After the run ``_agent`` holds the LoopResult. A guard or budget stop ends the cell with an error
        named for it (e.g. ``RepeatedToolCall``). In a notebook the cell is awaited so that Stop works while it
        runs; with `%autoawait off` the loop runs in a worker thread and only the kernel interrupt stops it.
        """
        from ..cell import run_blocking

        run_blocking(self.state, line, cell)

    async def run_cell(self, line: str, cell: str | None) -> None:
        """The awaited ``%%agent`` (or one-line ``%agent``) cell."""
        from ..cell import run_awaited

        await run_awaited(self.state, line, cell)

    async def awaited(self, magic: str, line: str, cell: str | None = None) -> None:
        """The input transformer's one awaited entry: the awaited form of ``magic`` (``agent``, ``agent_serve``,
        ``agent_mcp``, ``agent_undo``) on the cell's ``line`` (and body, for ``%%agent``)."""
        await self.state.awaited[magic](line, cell)
