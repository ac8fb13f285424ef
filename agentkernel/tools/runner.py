"""Running one round's calls.

Calls of a round run in parallel and are matched to their requests by ``call_id``; a side-effecting tool runs
only after approval and never beside another call. Whatever a tool does — raise, call ``sys.exit()``, return
50 MB, hang in a thread — the call gets an output and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..text import cut
from .base import (
    MAX_OUTPUT_CHARS,
    Approver,
    Decision,
    Tool,
    ToolCall,
    ToolOutput,
    ToolStatus,
    _checked_arguments,
    format_output,
)
from .timeouts import Timeouts

# What a tool may raise that is its own failure, not the run's: also SystemExit (``sys.exit()``, ``exit()``,
# argparse on bad input) and KeyboardInterrupt raised by the tool's code. The user's own interrupt reaches the run
# as the stop signal or as task cancellation, never as an exception inside a tool.
TOOL_FAULTS = (Exception, SystemExit, KeyboardInterrupt)


class ToolTimeout(Exception):
    """A tool ran past its own ``timeout`` (told apart from a ``TimeoutError`` the tool itself raised)."""


async def invoke(tool: Tool, kwargs: dict[str, Any], timeouts: Timeouts | None = None) -> Any:
    """Call a tool; a sync function runs in a worker thread of its own (see :func:`in_thread`).

    ``timeouts`` (a run's) watches the tool's timeout; without it, the call gets one of its own.
    """
    if timeouts is None:
        timeouts = Timeouts()
        try:
            return await invoke(tool, kwargs, timeouts)
        finally:
            timeouts.close()
    call: Awaitable[Any] = tool.fn(**kwargs) if tool.is_async else in_thread(tool.fn, kwargs, tool.name)
    if not tool.timeout:
        return await call
    # What asyncio.timeout() does, with a timer shared by the run's calls (see Timeouts).
    task = asyncio.current_task()
    assert task is not None
    before = task.cancelling()
    timeouts.watch(task, tool.timeout)
    try:
        result = await call
    except asyncio.CancelledError:
        if timeouts.release(task) and task.uncancel() <= before:  # our cancellation alone: the tool timed out
            raise ToolTimeout from None
        raise
    except BaseException:
        if timeouts.release(task):  # the tool turned our cancellation into an error of its own: that error stands
            task.uncancel()
        raise
    if timeouts.release(task):  # the tool swallowed our cancellation and returned: its result stands
        task.uncancel()
    return result


async def in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], name: str = "tool") -> Any:
    """Run ``fn(**kwargs)`` in a new daemon thread, in a copy of the caller's context (so prints land in the cell).

    Not ``asyncio.to_thread``: a thread abandoned after Stop or a deadline would hold the process open (the
    default executor's threads are joined when ``asyncio.run`` ends and again at exit). A daemon thread does not.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the call was cut off (Stop, timeout): nobody waits for it any more
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        result, error = None, None
        try:
            result = context.run(fn, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, which decides
            error = e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the event loop is closed: the run that wanted this result is over
            pass

    threading.Thread(target=work, name=f"agentkernel {name}", daemon=True).start()
    return await future


async def run_call(
    call: ToolCall,
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
    timeouts: Timeouts | None = None,
    approved: set[str] | None = None,
) -> None:
    """Run one call and fill in its status and output (cut to the tool's limit); never raises for a tool's failure.

    ``approved`` holds the names of the tools approved for the rest of the run: their calls are not asked about,
    and an approver's ``Decision(approve=True, for_run=True)`` adds to it.
    """
    call.started = time.monotonic()
    on_start(call)
    tool = tools.get(call.name)
    try:
        status, output = await _outcome(call, tool, tools, approve, timeouts, approved)
        if isinstance(output, ToolOutput):
            call.images, output = output.images, output.text
        limit = tool.max_output_chars if tool else MAX_OUTPUT_CHARS
        call.status, call.output = status, cut(output, limit) if limit else output
    finally:
        call.duration = time.monotonic() - call.started


async def _outcome(
    call: ToolCall, tool: Tool | None, tools: dict[str, Tool], approve: Approver | None, timeouts: Timeouts | None,
    approved: set[str] | None,
) -> tuple[ToolStatus, str | ToolOutput]:
    if tool is None:
        return "error", f"error: unknown tool {call.name!r}; available: {', '.join(tools)}"
    try:
        kwargs = _checked_arguments(tool, call)
    except ValueError as e:
        return "error", f"error: bad arguments for {call.name}: {e}"
    if not tool.read_only and (denial := await _denial(call, tool, approve, approved)):
        return "denied", denial
    try:
        value = await invoke(tool, kwargs, timeouts)
        return "ok", value if isinstance(value, ToolOutput) else format_output(value)
    except ToolTimeout:
        return "error", f"error: {call.name} timed out after {tool.timeout:g} s"
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the round is being stopped: let the cancellation through
            raise
        # Something inside the tool was cancelled, not the tool: that is the tool's own failure.
        return "error", f"error: {call.name} was cancelled"
    except TOOL_FAULTS as e:  # a tool's own failure is the model's to see, not the loop's to raise
        return "error", f"error: {_describe(e)}"


async def _denial(call: ToolCall, tool: Tool, approve: Approver | None, approved: set[str] | None) -> str | None:
    """Why a side-effecting call may not run, or None: only the bool True or an approving :class:`Decision` (or an
    awaitable of either) approves; a tool in ``approved`` is not asked about."""
    if approved is not None and tool.name in approved:
        return None
    why = f"denied: {call.name} has side effects and"
    if approve is None:
        return f"{why} no one is there to approve it"
    try:
        verdict = approve(call, tool)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except TOOL_FAULTS as e:
        return f"{why} the approval failed ({_describe(e)})"
    if isinstance(verdict, Decision):
        if verdict.approve is True:
            if verdict.for_run and approved is not None:
                approved.add(tool.name)
            return None
        if verdict.approve is False:
            note = str(verdict.note).strip()
            if verdict.reason:
                return f"{why} {verdict.reason}"
            return f"denied by the user: {note}" if note else f"{why} the user denied it"
    if verdict is True:
        return None
    return f"{why} the user denied it" if verdict is False else f"{why} the approver answered {verdict!r}, not True"


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}): the tool tried to end the process"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def run_round(
    calls: list[ToolCall],
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
    on_finish: Callable[[ToolCall], None],
    timeouts: Timeouts | None = None,
    approved: set[str] | None = None,
) -> None:
    """Run a round's calls: read-only ones in parallel, then each side-effecting one alone, in request order.

    Each call's result is written into its own :class:`ToolCall`, so callers match by call_id whatever order
    the calls finish in. ``timeouts`` (the run's) watches the tools' timeouts; ``approved`` (the run's) names the
    tools approved for the rest of the run (see :func:`run_call`).
    """

    async def one(call: ToolCall) -> None:
        await run_call(call, tools, approve, on_start, timeouts, approved)
        on_finish(call)

    def side_effecting(call: ToolCall) -> bool:
        return call.name in tools and not tools[call.name].read_only

    parallel = [c for c in calls if not side_effecting(c)]
    if len(parallel) == 1:  # the usual round: awaited here, without gather's task and its event-loop passes
        await one(parallel[0])
    elif parallel:
        await asyncio.gather(*(one(c) for c in parallel))
    for call in calls:
        if side_effecting(call):
            await one(call)
