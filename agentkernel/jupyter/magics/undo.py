"""``%agent_undo [RUN_ID]``: take back a run's notebook changes."""

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
        """``%agent_undo [RUN_ID]``: take back the notebook changes of a run (by default the last run that changed
        the notebook) in one step: the cells it added are removed, the cells it edited get their source back. A cell
        changed since the run wrote it is left as it is and named. Works in JupyterLab and Notebook 7 with
        agentkernel's extension, alone in its cell (it is awaited while the front end answers); elsewhere it says
        why it cannot."""
        why = "%autoawait is off (%autoawait on lets it wait)" if not self.state.shell.autoawait else \
            "%agent_undo must be alone in its cell, which is then awaited"
        print(f"cannot undo here: the front end's answers arrive only while the cell awaits, and {why}")

    async def undo(self, line: str, cell: str | None = None) -> None:
        """The awaited ``%agent_undo``."""
        from ..kernel.undo import undo_line

        print(await undo_line(self.state.shell, line))
