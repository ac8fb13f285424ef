"""A served session: an outside agent's tool calls, each through the same :class:`~agentkernel.tools.ToolRunner` as a
``%%agent`` call (approval, redaction, timeouts), under the session's budgets and guards.

The transport (:mod:`agentkernel.mcp.serving`) hands each call to :meth:`ServedSession.call`; calls run one at a
time, in the order they came. The guards speak to the outside agent: a call that repeats what it already got is told
so in its result, and past the guard's limit it is refused without running. The budgets (``max_tool_calls``,
``max_seconds``) hold for the whole session, and when one is spent the session ends. Stop ends the running call
(cancelling it, so ``run_python``'s code is interrupted) and the session.

An outside agent must not be able to grow the kernel: a call runs with its arguments whole, but what the session
keeps of it afterwards (its record in :attr:`ServedSession.calls`, the events its listeners hear, the transcript,
what the guards compare) holds at most :data:`KEPT_CHARS` characters of its arguments and of its output, and the
guards compare longer texts by their SHA-256 digest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..events import (
    ClientSeen,
    Event,
    ItemCommitted,
    Listeners,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ..guards import GuardConfig, NoProgressGuard, RepeatedCallGuard
from ..listeners.transcript import Transcript
from ..record import history as h
from ..result import LoopResult
from ..stop import StopSignal
from ..text import cut, short
from ..tools import Approver, Tool, ToolCall, ToolResult, ToolRunner, Turns
from ..usage import Limits

Progress = Callable[[float, str], Awaitable[None]]
"""Told every :data:`PROGRESS_EVERY` seconds while a call runs: the seconds so far and what the call is doing."""
PROGRESS_EVERY = 1.0
KEPT_CHARS = 10_000
"""What the session keeps of a call's arguments and of its output, in characters (the call ran with all of them)."""


@dataclass
class ServedCall:
    """One call of the session, as the record keeps it."""

    call: ToolCall
    result: ToolResult
    started: float
    """``time.time()`` when it came in."""
    waited: float = 0.0
    """Seconds it waited for the call before it (or for the kernel) before it ran."""

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def status(self) -> str:
        return self.result.status


@dataclass
class ServedSession:
    """The tools one served session offers and the record of its calls.

    ``approve`` asks about side-effecting calls exactly as in a ``%%agent`` run (the serving cell's panel, or a
    denial nobody decided); ``on_event`` (a listener, or a list of them) is told
    :class:`~agentkernel.events.ToolCallStarted` / :class:`~agentkernel.events.ToolCallFinished` as a run's listeners
    are, and :class:`~agentkernel.events.RunFinished` once, when the session ends (``aborted`` after Stop, else
    ``complete``; its detail says why).
    """

    tools: list[Tool]
    approve: Approver | None = None
    limits: Limits = field(default_factory=Limits)
    guards: GuardConfig = field(default_factory=GuardConfig)
    stop: StopSignal = field(default_factory=StopSignal)
    on_event: Callable[[Event], None] | Iterable[Callable[[Event], None]] | None = None
    transcript: Transcript | None = None
    on_end: Callable[[str], None] | None = None
    """Told why, once, when the session ends."""
    turns: Turns | None = None
    """When a call of a tool that touches the kernel may run (between the user's cells: the kernel's scheduler)."""
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    calls: list[ServedCall] = field(default_factory=list)
    """Every call, finished, in order."""
    ended: str = ""
    """Why the session ended ("" while it serves)."""
    clients: dict[str, float] = field(default_factory=dict)
    """The clients that listed or called tools (name and version, as each says), with when each was last seen."""

    def __post_init__(self) -> None:
        self.by_name = {t.name: t for t in self.tools}
        # The one road out: the session's events are redacted on the way, as a run's are, and the transcript is one
        # of their listeners. A session keeps no item it told (it never ends in a history): what it holds stays
        # bounded however long it serves.
        self.listeners = Listeners.of(self.on_event, self.transcript)
        self.listeners.remember = False
        self.runner = ToolRunner(self.by_name, self.approve, run_id=self.session_id,
                                 on_start=lambda call: self._emit(ToolCallStarted(kept_call(call))),
                                 on_finish=lambda result: self._emit(ToolCallFinished(kept_result(result))),
                                 on_approval=lambda event: self._emit(dataclasses.replace(event,
                                                                                          call=kept_call(event.call))),
                                 turns=self.turns)
        self.repeats = RepeatedCallGuard(self.guards.repeat_limit)
        self.no_progress = NoProgressGuard(self.guards.stuck_window, None)
        self.refused: dict[tuple[str, str], str] = {}  # calls a guard refuses from now on, with the guard's word
        self.lock = asyncio.Lock()
        self.running: asyncio.Task[Any] | None = None
        self.waiting = 0
        """Calls waiting for the one running."""
        self.count = 0
        """Calls received."""
        self.ran = 0
        """Calls run (those refused or cut before they started are not counted against ``max_tool_calls``)."""
        self._unsubscribe: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._emit(RunStarted(self.session_id, "", briefing={"served": [t.name for t in self.tools]}))

    # -- the tools, as a client sees them -------------------------------------------------------------------------

    def seen(self, client: str) -> bool:
        """A client (its name and version) listed or called tools; whether it is new to the session."""
        new = client not in self.clients
        self.clients[client] = time.time()
        if new:
            self._emit(ClientSeen(client))
        return new

    def start(self) -> None:
        """Listen for Stop, and start the ``max_seconds`` clock, on the running event loop."""
        if self._unsubscribe is None:
            self._unsubscribe = self.stop.subscribe(self._stopped)
        if self.limits.max_seconds and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.limits.max_seconds, self.end,
                                          f"HIT_WALL_CLOCK: the session's {self.limits.max_seconds:g} s are up")

    async def call(self, name: str, arguments: str, progress: Progress | None = None) -> ToolResult:
        """Run one call (``arguments``: its JSON object) as the session's rules say; its result, whatever happens.

        Cancelling the task that awaits it (the client's ``notifications/cancelled``) cancels the call.
        """
        came = time.time()
        self.count += 1
        call = ToolCall(f"call_{self.count}", name, arguments)
        self.waiting += 1
        try:
            await self.lock.acquire()
        finally:
            self.waiting -= 1
        waited = time.time() - came
        result = ToolResult(call, "aborted", "aborted: the client cancelled the call", synthetic=True)
        try:
            result = await self._run(call, progress)
        finally:  # a call the client cancelled is recorded too
            self.lock.release()
            record = ServedCall(kept_call(call), kept_result(result), came, waited)  # bounded, whatever came
            self.calls.append(record)
            self._emit(ItemCommitted(h.function_call(call.call_id, call.name, record.call.arguments)))
            self._emit(ItemCommitted(h.function_call_output(call.call_id, record.result.output,
                                                            synthetic=record.result.synthetic)))
        return result

    async def _run(self, call: ToolCall, progress: Progress | None) -> ToolResult:
        refusal = self._refusal(call)
        if refusal is not None:
            result = ToolResult(call, "not_run", refusal, synthetic=True)
            self._emit(ToolCallStarted(kept_call(call)))
            self._emit(ToolCallFinished(kept_result(result)))
            return result
        self.ran += 1
        task = asyncio.ensure_future(self.runner.run([call]))
        self.running = task
        reporter = asyncio.ensure_future(self._report(call, progress)) if progress is not None else None
        try:
            [result] = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():  # the client cancelled the call (or the kernel's loop is going down): cut it too
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                self.runner.unfinished([call], "aborted: the client cancelled the call")
                raise
            # Stop or the session's clock cut the call: the client gets an error result
            [result] = self.runner.unfinished([call], f"aborted: {self.ended or 'the call was stopped'}")
        finally:
            self.running = None
            if reporter is not None:
                reporter.cancel()
        return self._guarded(result)

    def _refusal(self, call: ToolCall) -> str | None:
        """Why ``call`` is not run: the session ended, a budget is spent, or a guard refuses it; else None."""
        if self.ended:
            return f"not run: this session has ended ({self.ended})"
        if self.limits.max_tool_calls and self.ran >= self.limits.max_tool_calls:
            self.end(f"HIT_TOOL_CALL_CAP: the session's {self.limits.max_tool_calls} tool calls are spent")
            return f"not run: {self.ended}"
        refused = self.refused.get((call.name, compared(call.normalized)))
        if refused is not None:
            return f"refused: {refused}. Use the result you already have, or call something else."
        return None

    def _guarded(self, result: ToolResult) -> ToolResult:
        """The result, with what the guards say about it appended for the outside agent to read."""
        if result.synthetic:
            return result
        call = result.call
        arguments, output = compared(call.normalized), compared(result.output)
        notes = []
        if trip := self.repeats.record(call.name, arguments, output):
            self.refused[(call.name, arguments)] = f"REPEATED_TOOL_CALL: {trip.detail}"
            notes.append(f"{trip.status.upper()}: {trip.detail}. This call gave the same output before: it will be "
                         "refused from now on. Use this output, or change the arguments.")
        elif self.repeats.limit and self.repeats.counts.get((call.name, arguments, output), 0) > 1:
            count = self.repeats.counts[(call.name, arguments, output)]
            notes.append(f"note: this call returned this same output {count} times; at {self.repeats.limit} it is "
                         "refused. Use what it returned, or try something else.")
        if trip := self.no_progress.record_call(call.name, arguments):
            for name, normalized in list(self.no_progress.recent):
                self.refused.setdefault((name, normalized), f"NO_PROGRESS: {trip.detail}")
            notes.append(f"{trip.status.upper()}: {trip.detail}. These calls will be refused from now on: try "
                         "another way.")
        if not notes:
            return result
        return ToolResult(call, result.status, "\n\n".join([result.output, *notes]), result.images, result.displays,
                          result.duration)

    async def _report(self, call: ToolCall, progress: Progress) -> None:
        began = time.monotonic()
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            with contextlib.suppress(Exception):  # a client gone away is the transport's to notice
                await progress(time.monotonic() - began, f"{call.name} is running")

    # -- ending ---------------------------------------------------------------------------------------------------

    def _stopped(self) -> None:
        self.end(self.stop.reason or "stopped")

    def end(self, why: str) -> None:
        """End the session: the running call is cut (its client gets an error result) and no call runs after."""
        if self.ended:
            return
        self.ended = why
        if self.running is not None and not self.running.done():
            self.running.cancel()
        if self._timer is not None:
            self._timer.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self.on_end is not None:
            self.on_end(why)
        self._emit(RunFinished(LoopResult("aborted" if self.stop.is_set() else "complete", None, [], detail=why,
                                          tool_calls=self.count, run_id=self.session_id)))

    def close(self) -> None:
        self.end("the session was closed")
        self.runner.close()
        if self.transcript is not None:
            self.transcript.close()

    def _emit(self, event: Event) -> None:
        if self.listeners:
            self.listeners(event)


def kept_call(call: ToolCall) -> ToolCall:
    """``call`` as the session keeps it: its arguments cut to :data:`KEPT_CHARS` (saying how long they were)."""
    if len(call.arguments) <= KEPT_CHARS:
        return call
    return ToolCall(call.call_id, call.name, cut(call.arguments, KEPT_CHARS))


def kept_result(result: ToolResult) -> ToolResult:
    """``result`` as the session keeps it: its call kept (:func:`kept_call`), its output cut to :data:`KEPT_CHARS`."""
    call = kept_call(result.call)
    if call is result.call and len(result.output) <= KEPT_CHARS:
        return result
    return dataclasses.replace(result, call=call, output=cut(result.output, KEPT_CHARS))


def compared(text: str) -> str:
    """What the guards compare of a call's arguments or output: the text itself, or for one longer than
    :data:`KEPT_CHARS`, its start and its SHA-256 digest (so that what they keep stays bounded)."""
    if len(text) <= KEPT_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{short(text, 200)} [{len(text):,} characters, sha256 {digest}]"
