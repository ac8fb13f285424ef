"""The kernel's scheduler: a call that touches the kernel runs between the user's cells (never during one, not even
at an awaiting cell's awaits), one at a time; a foreground run's calls are its cell's own; ``anytime`` tools run at
once. The shell is IPython's real EventManager with the cell events a kernel triggers."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.events import EventManager, available_events

from agentkernel import tool
from agentkernel.jupyter.scheduler import KernelScheduler, RunTurns
from agentkernel.tools import ToolCall, ToolRunner


class Shell:
    """What the scheduler reads of a shell: its cell events and execution counter."""

    def __init__(self) -> None:
        self.events = EventManager(self, available_events)
        self.execution_count = 1
        self.exiter = object()  # IPython's exit(), which would end the kernel
        self.user_ns: dict[str, Any] = {"exit": self.exiter, "quit": self.exiter}

    def start_cell(self) -> int:
        self.execution_count += 1  # IPython advances the counter as the cell starts
        self.events.trigger("pre_run_cell", SimpleNamespace())
        return self.execution_count - 1

    def end_cell(self) -> None:
        self.events.trigger("post_run_cell", SimpleNamespace())

    def showtraceback(self) -> None:  # EventManager reports a failing callback through it
        raise AssertionError("a scheduler callback failed")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def call(name: str = "inspect_variable") -> ToolCall:
    return ToolCall("c1", name, "{}")


def test_a_background_call_waits_for_the_running_cell_and_says_which() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell, running=False)
        told: list[str] = []
        turns = RunTurns(scheduler, changed=lambda: told.append(turns.waiting))
        number = shell.start_cell()
        ran = asyncio.Event()

        async def background() -> None:
            async with turns.turn(call()):
                assert scheduler.cell is None, "a background call ran while a cell ran"
                ran.set()

        task = asyncio.ensure_future(background())
        await settle()
        assert not ran.is_set() and turns.waiting == f"waiting for cell [{number}] to finish"
        shell.end_cell()
        await asyncio.wait_for(task, 1)
        assert ran.is_set() and turns.waiting == "" and told == [f"waiting for cell [{number}] to finish", ""]
        assert not scheduler.busy

    asyncio.run(main())


def test_the_running_cells_own_run_does_not_wait_for_its_cell_but_waits_for_a_call_in_flight() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell, running=False)
        background, foreground = RunTurns(scheduler), RunTurns(scheduler, own_cell=True)
        release = asyncio.Event()
        order: list[str] = []

        async def long_background_call() -> None:
            async with background.turn(call("run_python")):
                order.append("background starts")
                await release.wait()
                order.append("background ends")

        first = asyncio.ensure_future(long_background_call())
        await settle()
        shell.start_cell()  # the foreground %%agent cell starts while the background call runs

        async def own_call() -> None:
            async with foreground.turn(call()):
                order.append("foreground runs")

        second = asyncio.ensure_future(own_call())
        await settle()
        assert order == ["background starts"] and foreground.waiting == "waiting for run_python to finish"
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 1)
        assert order == ["background starts", "background ends", "foreground runs"]  # during its own cell

    asyncio.run(main())


def test_one_runs_parallel_calls_run_side_by_side_and_another_runs_call_waits_for_them_all() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell, running=False)
        first, second = RunTurns(scheduler), RunTurns(scheduler)
        release = asyncio.Event()
        inside: list[str] = []

        async def hold(turns: RunTurns, name: str) -> None:
            async with turns.turn(call(name)):
                inside.append(name)
                assert shell.user_ns["exit"] is sys.exit  # refused while any call of the run holds the turn
                await release.wait()
                inside.remove(name)

        a, b = asyncio.ensure_future(hold(first, "a")), asyncio.ensure_future(hold(first, "b"))
        await settle()
        other = asyncio.ensure_future(hold(second, "c"))
        await settle()
        assert inside == ["a", "b"] and second.waiting == "waiting for a to finish"  # a model's parallel calls
        release.set()
        await asyncio.wait_for(asyncio.gather(a, b, other), 1)
        assert not scheduler.busy and shell.user_ns["exit"] is shell.exiter  # given back once, by the last

    asyncio.run(main())


def test_a_cell_that_lends_the_kernel_lets_calls_run_at_its_awaits() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell)  # made inside a cell: that cell runs
        turns = RunTurns(scheduler)
        task = asyncio.ensure_future(_run(turns))
        await settle()
        assert not task.done() and turns.waiting
        with scheduler.lent():
            await asyncio.wait_for(task, 1)
        assert scheduler.cell_runs  # the cell still runs once it stops lending

    asyncio.run(main())


async def _run(turns: RunTurns) -> None:
    async with turns.turn(call()):
        pass


def test_a_waiting_call_that_is_cancelled_leaves_the_turn_free_and_no_waiting_text() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell)
        turns = RunTurns(scheduler)
        task = asyncio.ensure_future(_run(turns))
        await settle()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert turns.waiting == "" and not scheduler.busy
        shell.end_cell()
        await asyncio.wait_for(_run(turns), 1)  # the next call runs

    asyncio.run(main())


@tool
def kernel_read() -> str:
    """Read the namespace."""
    return "read"


@tool(anytime=True)
def file_read() -> str:
    """Read a file."""
    return "file"


@tool(timeout=0.2)
def quick() -> str:
    """A tool with a short timeout."""
    return "quick"


def test_the_runner_runs_anytime_tools_at_once_and_waits_for_the_cell_with_the_others_outside_their_timeout() -> None:
    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell)
        runner = ToolRunner({t.name: t for t in (kernel_read, file_read, quick)}, turns=RunTurns(scheduler))
        [now] = await asyncio.wait_for(runner.run([ToolCall("a", "file_read", "{}")]), 1)
        assert now.output == "file"  # while the cell runs
        waiting = asyncio.ensure_future(runner.run([ToolCall("b", "kernel_read", "{}"), ToolCall("c", "quick", "{}")]))
        await asyncio.sleep(0.5)  # longer than quick's timeout: the wait is not counted against it
        assert not waiting.done()
        shell.end_cell()
        results = await asyncio.wait_for(waiting, 2)
        assert [(r.status, r.output) for r in results] == [("ok", "read"), ("ok", "quick")]

    asyncio.run(main())


def test_exit_in_a_call_between_cells_raises_systemexit_instead_of_ending_the_kernel() -> None:
    """A background call runs between cells, outside any foreground run's refusal of exit(): its turn refuses it."""

    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell, running=False)
        seen = {}
        for own in (False, True):
            async with RunTurns(scheduler, own_cell=own).turn(call()):
                seen[own] = shell.user_ns["exit"]
        assert seen[False] is sys.exit and seen[True] is shell.exiter  # the cell's own run: its cell refuses it
        assert shell.user_ns["exit"] is shell.exiter and shell.user_ns["quit"] is shell.exiter

    asyncio.run(main())


def test_the_panels_status_line_says_what_a_queued_call_waits_for() -> None:
    from agentkernel.jupyter.panel import Panel
    from agentkernel.stop import StopSignal
    from agentkernel.usage import Limits

    async def main() -> None:
        shell = Shell()
        panel = Panel(Limits(), StopSignal())
        panel.turns = RunTurns(KernelScheduler(shell), changed=panel.schedule)
        number = shell.start_cell()
        task = asyncio.ensure_future(_run(panel.turns))
        await settle()
        assert panel.status_text().endswith(f"· waiting for cell [{number}] to finish")
        shell.end_cell()
        await asyncio.wait_for(task, 1)
        assert "waiting for cell" not in panel.status_text()
        panel.close()

    asyncio.run(main())


def test_a_tool_is_not_anytime_unless_marked_and_the_file_and_mcp_tools_are() -> None:
    from agentkernel.tools.files import file_tools

    assert not kernel_read.anytime and file_read.anytime
    assert all(t.anytime for t in file_tools("."))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["start", "end", "lend", "unlend", "bg", "fg", "step"]), max_size=40))
def test_no_call_runs_during_a_cell_it_does_not_own_and_no_two_calls_run_at_once(steps: list[str]) -> None:
    """Any interleaving of cells starting and ending, lending, and background and foreground calls: a background call
    runs only while no cell runs or the cell lends; never two calls at once; every call ends once the cells do."""

    async def main() -> None:
        shell = Shell()
        scheduler = KernelScheduler(shell, running=False)
        background, foreground = RunTurns(scheduler), RunTurns(scheduler, own_cell=True)
        inside: list[str] = []
        tasks = []

        async def one(turns: RunTurns, kind: str) -> None:
            async with turns.turn(call()):
                assert set(inside) <= {kind}, "two runs' calls held the turn at once"
                if kind == "bg":
                    assert not scheduler.cell_runs, "a background call ran during a cell that did not lend"
                inside.append(kind)
                await asyncio.sleep(0)
                inside.remove(kind)

        lends: list[Any] = []
        for step in steps:
            if step == "start" and scheduler.cell is None:
                shell.start_cell()
            elif step == "end":
                shell.end_cell()
            elif step == "lend":
                lends.append(scheduler.lent())
                lends[-1].__enter__()
            elif step == "unlend" and lends:
                lends.pop().__exit__(None, None, None)
            elif step in ("bg", "fg"):
                tasks.append(asyncio.ensure_future(one(background if step == "bg" else foreground, step)))
            await asyncio.sleep(0)
        while lends:
            lends.pop().__exit__(None, None, None)
        shell.end_cell()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        assert not scheduler.busy and background.waiting == foreground.waiting == ""

    asyncio.run(main())
