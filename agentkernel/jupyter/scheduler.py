"""When a tool that touches the kernel may run: between the user's cells, one run's calls at a time.

A tool that reads or changes the notebook's namespace or its cells (``list_variables``, ``inspect_variable``,
``last_error``, ``run_python``, ``read_notebook``, ``add_cell``, ``edit_cell``, the user's ``@tool`` s unless marked
``anytime``) must not run in the middle of one of the user's cells, not even at the awaits of a cell that awaits:
it would see half of what the cell does, or change a variable under it. The kernel's one
:class:`KernelScheduler` knows whether a cell runs (IPython's ``pre_run_cell`` / ``post_run_cell``), and each run
or served session asks it for a turn through a :class:`RunTurns`
(:class:`agentkernel.tools.runner.Turns`):

- a background run's or a served session's call waits until no cell of the user's runs, then runs before the next
  one (the kernel handles the next ``execute_request`` only when the loop gets to it, after the call has started);
- a foreground ``%%agent`` run is the running cell's own: its calls do not wait for their own cell;
- one run holds the turn at a time: the calls of one round of one run run side by side, as they always did (a
  model's parallel calls), but never beside another run's or session's calls.

A cell that waits for agent work (``%agent_wait``) lends the kernel meanwhile (:meth:`KernelScheduler.lent`).
File tools and MCP tools (``anytime``) run at any time. **Limit**: a cell the user starts while such a call already
runs in a worker thread (``run_python``'s code, a sync tool) runs beside it: the kernel cannot hold a cell back.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..tools import ToolCall
from .exits import exit_refused

_SCHEDULERS: weakref.WeakKeyDictionary[Any, KernelScheduler] = weakref.WeakKeyDictionary()


def scheduler_of(shell: Any) -> KernelScheduler:
    """The kernel's scheduler, made (and hooked to the shell's cell events) the first time a cell asks for it."""
    found = _SCHEDULERS.get(shell)
    if found is None:
        found = _SCHEDULERS[shell] = KernelScheduler(shell)
    return found


class KernelScheduler:
    """Whether one of the user's cells runs, and the one turn on the kernel that calls take (see the module).

    Made from inside a cell (a magic asks for it), so that cell counts as running until its ``post_run_cell``.
    """

    def __init__(self, shell: Any, *, running: bool = True):
        self.shell = shell
        self.cell: int | None = self._number() if running else None
        """The running cell's execution count (None between cells)."""
        self.lending = 0
        """Cells that lend the kernel while they wait for agent work (``%agent_wait``)."""
        self.owner: RunTurns | None = None
        """The run or session whose calls hold the turn (None while none does)."""
        self.holders: list[str] = []
        """The tools whose calls hold the turn."""
        self._refusing = contextlib.ExitStack()
        self._wake = asyncio.Event()
        self.events = getattr(shell, "events", None)  # None: a shell without cells (a test's), never running one
        if self.events is not None:
            self.events.register("pre_run_cell", self._started)
            self.events.register("post_run_cell", self._ended)
        else:
            self.cell = None

    def _number(self) -> int | None:
        count = getattr(self.shell, "execution_count", None)
        return count - 1 if isinstance(count, int) else 0  # IPython advances the counter as a cell starts

    def _started(self, info: Any) -> None:
        self.cell = self._number()
        self._changed()

    def _ended(self, result: Any) -> None:
        self.cell = None
        self._changed()

    def _changed(self) -> None:
        """Wake every waiting call, which looks again."""
        self._wake.set()
        self._wake = asyncio.Event()

    @property
    def cell_runs(self) -> bool:
        """Whether a cell of the user's runs and holds the kernel (not lending it)."""
        return self.cell is not None and not self.lending

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """While the running cell only waits for agent work, calls may run at its awaits."""
        self.lending += 1
        self._changed()
        try:
            yield
        finally:
            self.lending -= 1
            self._changed()

    def close(self) -> None:
        """Stop following the shell's cells (a test's scheduler; the kernel's lives as long as the kernel)."""
        if self.events is not None:
            for event, callback in (("pre_run_cell", self._started), ("post_run_cell", self._ended)):
                with contextlib.suppress(ValueError):
                    self.events.unregister(event, callback)
        self.cell = None
        self._changed()

    @property
    def busy(self) -> bool:
        """Whether a call holds the turn."""
        return self.owner is not None

    def _may_run(self, turns: RunTurns) -> bool:
        return (turns.own_cell or not self.cell_runs) and (self.owner is None or self.owner is turns)

    @contextlib.asynccontextmanager
    async def turn(self, turns: RunTurns, call: ToolCall) -> AsyncIterator[None]:
        """Wait until ``turns`` may run a call that touches the kernel, and hold the turn while it runs."""
        while not self._may_run(turns):
            turns.wait(self.why_waiting(turns))
            try:
                await self._wake.wait()
            finally:
                turns.wait("")
        if self.owner is None:
            self.owner = turns
            if not turns.own_cell:
                # Between the user's cells, exit() in a tool or the code it runs must not end the kernel (a
                # foreground run's cell refuses it for the run's length, see exits.py); once for all the holders
                self._refusing.enter_context(exit_refused(self.shell))
        self.holders.append(call.name)
        try:
            yield
        finally:
            self.holders.remove(call.name)
            if not self.holders:
                self.owner = None
                self._refusing.close()
            self._changed()

    def why_waiting(self, turns: RunTurns) -> str:
        """What a call of ``turns`` waits for, as the panel says it."""
        if not turns.own_cell and self.cell_runs:
            return f"waiting for cell [{self.cell}] to finish" if self.cell else "waiting for the cell to finish"
        return f"waiting for {self.holders[0]} to finish" if self.holders else "waiting for the kernel"


@dataclass(eq=False)  # one per run: compared by identity
class RunTurns:
    """One run's or served session's way to the kernel's turn (an :class:`agentkernel.tools.runner.Turns`).

    ``own_cell``: the run is the running cell's own (a foreground ``%%agent``), so its calls do not wait for that
    cell. ``changed`` is told when a call starts or stops waiting (the panel redraws its status line).
    """

    scheduler: KernelScheduler
    own_cell: bool = False
    changed: Callable[[], None] | None = None
    waiting: str = ""
    """What the run's queued call waits for ("" while none waits)."""

    def turn(self, call: ToolCall) -> contextlib.AbstractAsyncContextManager[None]:
        return self.scheduler.turn(self, call)

    def wait(self, why: str) -> None:
        if why != self.waiting:
            self.waiting = why
            if self.changed is not None:
                self.changed()
