"""``%agent_runs``, ``%agent_wait [RUN]`` and ``%agent_stop [RUN]``: the kernel's background runs
(``%%agent --background``, :mod:`agentkernel.jupyter.background`)."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class

from ..errors import STOP_ERRORS
from ..kernel_state import Awaited
from .shared import StateMagics


@magics_class
class BackgroundMagics(StateMagics):
    """The background runs' magics; ``%agent_wait`` is awaited alone in its cell."""

    def awaited_forms(self) -> dict[str, Awaited]:
        return {"agent_wait": self.wait}

    @line_magic
    def agent_runs(self, line: str) -> None:
        """``%agent_runs``: list this kernel's background runs: number, cell, when it started, its status line."""
        print(self.state.background.listing())

    @line_magic
    def agent_stop(self, line: str) -> None:
        """``%agent_stop [RUN]``: stop the background run RUN (its number in ``%agent_runs``, or its run id), or every
        running one. As its panel's Stop: the history is kept, its record replaces its panel, ``_agent`` holds it."""
        print(self.state.background.stop(line))

    @line_magic
    def agent_wait(self, line: str) -> None:
        """``%agent_wait [RUN]``: wait until the background run RUN (or every running one, and every one that ended
        since the last ``%agent_wait``) has ended, for a notebook whose next cell needs its answer (``_agent`` then
        holds the last one to end). It ends as that run's cell would have: with the error named for a guard or budget
        stop. Alone in its cell (it is awaited there); the kernel interrupt ends the wait, not the runs."""
        print("%agent_wait must be alone in its cell, with autoawait on (the default in a notebook): the cell "
              "awaits the runs there")

    async def wait(self, line: str, cell: str | None = None) -> None:
        """The awaited ``%agent_wait``."""
        waited = await self.state.background.wait(self.state, line)
        if not waited:
            print("no background run is running")
            return
        for background in waited:
            print(background.row())
        stopped = [b.result for b in waited if b.result is not None and b.result.status in STOP_ERRORS]
        if stopped:
            raise STOP_ERRORS[stopped[0].status](stopped[0]) from None
