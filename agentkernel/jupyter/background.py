"""Background runs: ``%%agent --background`` ends its cell once the run has started, and the run goes on in the
kernel while the user's cells run.

The run is a task on the kernel's event loop, made in the starting cell's context, so whatever it shows goes to
that cell (ipykernel routes a task's output by the context it was made in). Its panel stays live there; when the
run ends, the panel's display is updated in place to the run's record (a front end applies a display update to the
cell that holds it, long after that cell ended) and its widgets are closed, and ``_agent`` holds the result. Its
calls that touch the kernel run between the user's cells (:mod:`agentkernel.jupyter.scheduler`), and its model's
stream is read on the model I/O thread (:mod:`agentkernel.models.off_loop`). The kernel interrupt is the user's
running cell's: it never reaches a background run, which Stop or ``%agent_stop`` ends.

``%agent_runs`` lists the kernel's background runs, ``%agent_wait [RUN]`` awaits them (lending the kernel to their
calls meanwhile), ``%agent_stop [RUN]`` stops them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.display import display

from ..result import LoopResult
from ..secrets import redact_text

if TYPE_CHECKING:
    from .cell import CellRun
    from .kernel_state import KernelState

STOPPED = "stopped with %agent_stop"


@dataclass(eq=False)
class BackgroundRun:
    """One background run of the kernel: its number (1, 2, ...), the cell that started it, the run."""

    number: int
    cell: int | None
    run: CellRun
    started: float = field(default_factory=time.time)
    task: asyncio.Task[None] | None = None
    waited: bool = False
    """Whether a ``%agent_wait`` has reported its end."""

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def result(self) -> LoopResult | None:
        return self.run.loop.result

    def status(self) -> str:
        """The status line its panel shows while it runs, its record's once it has ended."""
        if not self.running and self.result is not None:
            return self.result.status_line
        if not self.running:
            return "ended without a result (the loop failed)"
        return self.run.panel.status_text()

    def row(self) -> str:
        """``run 2 · cell [5] · started 14:02:11 · running · 3 rounds ...``"""
        cell = f"cell [{self.cell}]" if self.cell is not None else "a cell"
        return f"run {self.number} · {cell} · started {time.strftime('%H:%M:%S', time.localtime(self.started))} · " \
               f"{self.status()}"


class BackgroundRuns:
    """The kernel's background runs, in the order they started."""

    def __init__(self) -> None:
        self.runs: list[BackgroundRun] = []

    def start(self, state: KernelState, run: CellRun) -> BackgroundRun:
        """Play ``run`` as a task of the kernel's loop, in this cell's context (its output goes to this cell)."""
        count = getattr(state.shell, "execution_count", None)
        started = BackgroundRun(len(self.runs) + 1, count - 1 if isinstance(count, int) else None, run)
        started.task = asyncio.ensure_future(self.play(state, started))
        self.runs.append(started)
        print(f"agentkernel: run {started.number} goes on in the background; its panel stays here. %agent_runs "
              f"lists the runs, %agent_wait {started.number} waits for it, %agent_stop {started.number} stops it")
        return started

    async def play(self, state: KernelState, background: BackgroundRun) -> None:
        """Run the loop to its end; then ``_agent`` holds its result and its panel becomes its record, in place."""
        from .cell import end_panel, publish
        from .kernel.undo import record_output
        from .render import record_bundle

        run = background.run
        ticker = asyncio.ensure_future(run.panel.tick())
        try:
            await run.loop.run(run.prompt)
        except Exception as error:  # the loop itself failed: said in its own cell, not left to asyncio's log
            print(redact_text(f"agentkernel: background run {background.number} failed: {type(error).__name__}: "
                              f"{error}"))
        finally:
            ticker.cancel()
            result = run.loop.result
            if result is None:  # the loop failed (or the kernel is going down): no live panel left behind
                end_panel(run)
            else:
                published = publish(state, run, result)
                if run.cells:
                    await run.notebook.write_cells(run.kernel.executed_calls, run.loop.run_id)
                if run.shown is not None:  # the panel's display becomes the record
                    run.shown.update(record_bundle(published, run.panel.timeline), raw=True)
                    run.shown = None
                    # and its Undo button follows it, in the run's cell
                    if (button := record_output(state.shell, run.loop.run_id, run.notebook.changes)) is not None:
                        display(button.data, metadata=button.metadata, raw=True)
                run.panel.close()

    def find(self, word: str, *, running: bool) -> list[BackgroundRun]:
        """The runs ``word`` names: a run's number (``2``), its run id (or the start of it); none named: every
        running one (``running``: and, for ``%agent_wait``, every one that ended since it last waited), else every
        one. UsageError for a word that names none."""
        word = word.strip()
        if not word:
            return [r for r in self.runs if r.running or not running or not r.waited]
        found = [r for r in self.runs if word == str(r.number) or len(word) >= 4 and r.run.loop.run_id.startswith(word)]
        if not found:
            known = ", ".join(str(r.number) for r in self.runs) or "none yet"
            raise UsageError(f"no background run {word!r} in this kernel (its runs: {known}; %agent_runs lists them)")
        return found

    def listing(self) -> str:
        """What ``%agent_runs`` prints."""
        if not self.runs:
            return "no background runs in this kernel (%%agent --background starts one)"
        return "\n".join(r.row() for r in self.runs)

    def stop(self, word: str) -> str:
        """Stop the runs ``word`` names (every running one if none); what to print."""
        lines = []
        for background in self.find(word, running=True) if word.strip() else [r for r in self.runs if r.running]:
            if background.running:
                background.run.loop.stop.set(STOPPED)
                lines.append(f"stopping run {background.number}: its record replaces its panel in its cell")
            else:
                lines.append(f"run {background.number} has already ended: {background.status()}")
        return "\n".join(lines) or "no background run is running"

    async def wait(self, state: KernelState, word: str) -> list[BackgroundRun]:
        """Wait until the runs ``word`` names have ended (every running one if none), lending the kernel to their
        calls meanwhile (the waiting cell runs no code of its own). Cancelling the wait (the kernel interrupt) leaves
        the runs going."""
        from .scheduler import scheduler_of

        waited = self.find(word, running=True)
        tasks = {r.task for r in waited if r.task is not None and not r.task.done()}
        if tasks:
            with scheduler_of(state.shell).lent():
                await asyncio.wait(tasks)
        for background in waited:
            background.waited = True
        return waited
