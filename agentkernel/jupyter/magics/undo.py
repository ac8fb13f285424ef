"""``%agent_undo [RUN_ID]``: take back a run's notebook changes and what it did to the kernel's variables;
``%agent_undo --forget [RUN_ID]``: let go of what the kernel keeps to undo them."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class

from ..kernel_state import Awaited
from .shared import StateMagics


@magics_class
class UndoMagics(StateMagics):
    """``%agent_undo``, awaited alone in its cell while the front end answers."""

    def awaited_forms(self) -> dict[str, Awaited]:
        return {"agent_undo": self.undo}

    @line_magic
    def agent_undo(self, line: str) -> None:
        """``%agent_undo [RUN_ID]``: take back what a run (by default the newest with something left to undo) did,
        in one step: the cells it added are removed, the cells it edited get their source back, the variables its
        ``run_python`` calls made are removed, those it rebound or deleted get their objects back, and objects it
        changed in place get their contents back. A cell or a variable changed since the run is left as it is and
        named, and so is what cannot be restored. The variables are taken back wherever the kernel runs; the cells
        in JupyterLab and Notebook 7 with agentkernel's extension, alone in its cell (it is awaited while the front
        end answers); elsewhere it says why it cannot.

        ``%agent_undo --forget [RUN_ID]``: let go of what the kernel keeps so that the variables of RUN_ID (by
        default of every run) can be undone: the old objects of the names it rebound or deleted (a deleted frame's
        memory is freed only then, or once the kernel forgets the run, 20 runs later) and the copies of what it
        changed in place. Those changes can no longer be undone; the run's cells still can."""
        from ..kernel.undo import undo_unawaited

        why = "%autoawait is off (%autoawait on lets it wait)" if not self.state.shell.autoawait else \
            "%agent_undo must be alone in its cell, which is then awaited"
        print(undo_unawaited(self.state.shell, line, why))

    async def undo(self, line: str, cell: str | None = None) -> None:
        """The awaited ``%agent_undo``."""
        from ..kernel.undo import undo_line

        print(await undo_line(self.state.shell, line))
