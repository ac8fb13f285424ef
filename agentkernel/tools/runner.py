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
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ..errors import describe_error
from ..secrets import KERNEL
from ..text import cut, valid_text
from .base import (
    MAX_OUTPUT_CHARS,
    ApprovalAsked,
    ApprovalDecided,
    Approver,
    Decision,
    Display,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolResult,
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
    task = timeouts.current_task()
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


class Turns(Protocol):
    """Who says when a tool that touches the kernel may run (one scheduler per kernel, in the notebook front end).

    The runner enters ``turn(call)`` around each call of a tool not marked ``anytime``, after its approval and
    outside its timeout: the call waits there (for the user's running cell to end) and holds the turn while it runs.
    """

    def turn(self, call: ToolCall) -> AbstractAsyncContextManager[object]: ...


class ToolRunner:
    """Runs the tool calls of one run: approvals, worker threads, timeouts and the tools approved for the run.

    ``await runner.run(calls)`` runs a round and returns each call's :class:`ToolResult` in request order; it
    calls ``on_start(call)`` and ``on_finish(result)`` (the loop's events) as each call starts and finishes. If
    the round is cut short (Stop, the wall clock), :attr:`done` holds the results of the calls that finished and
    :meth:`unfinished` makes the others'. With ``turns``, a call of a tool not marked ``anytime`` runs in its turn
    (see :class:`Turns`). Approvals are decided here, and each is told to ``on_approval``: an :class:`ApprovalAsked`
    before the approver is asked, an :class:`ApprovalDecided` once it answered (or the tool was approved for the
    run, or nobody can approve it).
    """

    def __init__(self, tools: dict[str, Tool], approve: Approver | None = None, *, run_id: str = "",
                 on_start: Callable[[ToolCall], None] | None = None,
                 on_finish: Callable[[ToolResult], None] | None = None, turns: Turns | None = None,
                 on_approval: Callable[[ApprovalAsked | ApprovalDecided], None] | None = None):
        self.tools = tools
        self.on_approval = on_approval
        self.turns = turns
        self.approve = approve
        self.run_id = run_id
        self.on_start = on_start
        self.on_finish = on_finish
        self.approved_for_run: set[str] = set()
        """Tools the approver said yes to for the rest of this run (``Decision(approve=True, for_run=True)``)."""
        self.done: dict[str, ToolResult] = {}
        """The finished calls of the current round, by call_id."""
        self.started: dict[str, float] = {}
        self.timeouts = Timeouts()  # one timer for the run's calls

    def close(self) -> None:
        self.timeouts.close()

    async def run(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run a round's calls: read-only ones in parallel, then each side-effecting one alone, in request order."""
        self.done, self.started = {}, {}
        alone = [c for c in calls if self._side_effecting(c)]
        parallel = [c for c in calls if not self._side_effecting(c)] if alone else calls
        if len(parallel) == 1:  # the usual round: awaited here, without gather's task and its event-loop passes
            await self._one(parallel[0])
        elif parallel:
            await asyncio.gather(*(self._one(c) for c in parallel))
        for call in alone:
            await self._one(call)
        return [self.done[call.call_id] for call in calls]

    def unfinished(self, calls: Iterable[ToolCall], output: str, status: ToolStatus = "aborted") -> list[ToolResult]:
        """Results for ``calls`` that never finished (``output`` as their synthetic output); finished ones keep
        theirs. The synthetic ones are told to the listener as finished."""
        results = []
        for call in calls:
            result = self.done.get(call.call_id)
            if result is None:
                started = self.started.get(call.call_id)
                result = ToolResult(call, status, output, synthetic=True,
                                    duration=time.monotonic() - started if started else 0.0)
                if self.on_finish is not None:
                    self.on_finish(result)
            results.append(result)
        return results

    def _side_effecting(self, call: ToolCall) -> bool:
        return call.name in self.tools and not self.tools[call.name].read_only

    async def _one(self, call: ToolCall) -> None:
        self.started[call.call_id] = started = time.monotonic()
        if self.on_start is not None:
            self.on_start(call)
        tool = self.tools.get(call.name)
        status, output = await self._outcome(call, tool)
        result = self._result(call, tool, status, output, time.monotonic() - started)
        self.done[call.call_id] = result
        if self.on_finish is not None:
            self.on_finish(result)

    @staticmethod
    def _result(call: ToolCall, tool: Tool | None, status: ToolStatus, output: str | ToolOutput,
                duration: float) -> ToolResult:
        """The one place a tool's output becomes a result: redacted, cut to the tool's limit, text that encodes.

        Every tool's output, error and display is redacted here against the kernel's secret set as it is now (see
        :mod:`agentkernel.secrets`): whatever the tool, no value of the set reaches the model, the panel or a record.
        """
        # As the set is now: any call (a read-only @tool setting os.environ too) or a thread may have changed it.
        secrets = KERNEL.current
        images: list[dict[str, Any]] = []
        displays: tuple[Display, ...] = ()
        if isinstance(output, ToolOutput):
            images, displays = output.images, tuple(Display(secrets.redact_bundle(d.data),
                                                            secrets.redact_value(d.metadata))
                                                    for d in output.displays)
            output = output.text
        output = secrets.redact(output)  # before the cut, so that no part of a secret is left
        limit = tool.max_output_chars if tool else MAX_OUTPUT_CHARS
        text = valid_text(cut(output, limit) if limit else output)
        return ToolResult(call, status, text, tuple(images), displays, duration)

    async def _outcome(self, call: ToolCall, tool: Tool | None) -> tuple[ToolStatus, str | ToolOutput]:
        if tool is None:
            return "error", f"error: unknown tool {call.name!r}; available: {', '.join(self.tools)}"
        try:
            kwargs = _checked_arguments(tool, call)
        except ValueError as e:
            return "error", f"error: bad arguments for {call.name}: {e}"
        if not tool.read_only and (denial := await self._denial(call, tool)):
            return "denied", denial
        if tool.context_parameter:
            kwargs[tool.context_parameter] = ToolContext(call.call_id, call.name, self.run_id)
        try:
            if self.turns is not None and not tool.anytime:
                async with self.turns.turn(call):
                    value = await invoke(tool, kwargs, self.timeouts)
            else:
                value = await invoke(tool, kwargs, self.timeouts)
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
            text = f"error: {describe_error(e)}"
            return "error", ToolOutput(text, displays=list(e.displays)) if isinstance(e, ToolError) else text

    async def _denial(self, call: ToolCall, tool: Tool) -> str | None:
        """Why a side-effecting call may not run, or None: only the bool True or an approving :class:`Decision` (or
        an awaitable of either) approves; a tool approved for the run is not asked about. The decision is told to
        :attr:`on_approval` (:class:`ApprovalAsked`, :class:`ApprovalDecided`)."""
        tell = self.on_approval or (lambda event: None)
        if tool.name in self.approved_for_run:
            tell(ApprovalDecided(call, True, "rule", for_run=True))
            return None
        why = f"denied: {call.name} has side effects and"
        if self.approve is None:
            tell(ApprovalDecided(call, False, "policy", reason="no one is there to approve it"))
            return f"{why} no one is there to approve it"
        asked = time.monotonic()
        tell(ApprovalAsked(call, asked))
        try:
            verdict = self.approve(call, tool)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except TOOL_FAULTS as e:
            failed = f"the approval failed ({describe_error(e)})"
            tell(ApprovalDecided(call, False, "policy", time.monotonic() - asked, reason=failed))
            return f"{why} {failed}"
        except BaseException:  # Stop cancelled the wait: the call is denied with the run
            tell(ApprovalDecided(call, False, "user", time.monotonic() - asked, stopped=True))
            raise
        waited = time.monotonic() - asked
        if not isinstance(verdict, Decision) or not isinstance(verdict.approve, bool):  # only True approves
            verdict = Decision(verdict is True, reason="" if isinstance(verdict, bool) else
                               f"the approver answered {verdict!r}, not True")
        if verdict.approve is True and verdict.for_run:
            self.approved_for_run.add(tool.name)
        tell(ApprovalDecided(call, verdict.approve is True, verdict.by or "user", waited, verdict.for_run,
                             str(verdict.note).strip(), verdict.reason))
        if verdict.approve is True:
            return None
        note = str(verdict.note).strip()
        if verdict.asked:
            why = f"denied: {call.name} {verdict.asked}, and"
        if verdict.reason:
            return f"{why} {verdict.reason}"
        return f"denied by the user: {note}" if note and verdict.approve is False else f"{why} the user denied it"
