"""The sampling loop: request -> tool calls -> outputs -> checks -> next round.

There is no round cap. A run ends when a round has no tool calls, the user stops it, the model fails, or a
guard or budget in :mod:`agentkernel.guards` trips. Whatever the ending, every committed ``function_call`` has
its ``function_call_output`` in the history before the run returns.

What the loop leans on: the run's briefing (:mod:`agentkernel.briefing`: the system prompt and tools), its
counters (:mod:`agentkernel.run_state`), its usage and cost (:mod:`agentkernel.metering`), one streamed request
(:mod:`agentkernel.streaming`) and the guards together (:class:`~agentkernel.guards.RunGuards`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from .briefing import Briefing
from .committing import RunHistory
from .compacting import Compactor
from .endings import Trip
from .events import (
    ContextUpdated,
    Event,
    ItemCommitted,
    Listener,
    Listeners,
    MessageDone,
    RoundStarted,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdated,
)
from .guards import GuardConfig, RunGuards
from .instructions import Instruction
from .listeners.transcript import open_transcript
from .metering import Meter, truncation
from .models.base import (
    ContextOverflowError,
    GatewayBudgetError,
    Model,
    ModelError,
    ModelRequest,
    TextDelta,
)
from .pricing import Pricer, no_price_error, price_for
from .record import history as h
from .record.context import CONTEXT_FRAME, ContextView, estimate
from .result import LoopResult
from .run_state import RunState
from .secrets import KERNEL
from .skills import Skills
from .stop import StopSignal
from .streaming import Response, stream_into
from .text import valid_text
from .tools import Approver, Tool, ToolCall, ToolResult, ToolRunner, as_registry
from .usage import Limits, Usage

ABORTED_OUTPUT = "aborted: the run was stopped before this call finished"

YIELD_EVERY = 0.005
"""Seconds a run may go without letting the event loop run (when neither its model nor its tools ever wait)."""


class _Stopped(Exception):
    """Raised inside the loop when the text-loop guard cuts a model's response."""

    def __init__(self, trip: Trip):
        self.trip = trip


class AgentLoop:
    """One run of the loop; :func:`run` is the usual way in.

    The object keeps its state (``history``, ``usage``, ``result``) so that a caller whose task is cancelled
    can still read what the run committed.

    ``transcript``: a JSONL file to append the run to, an existing folder (or True: ``$AGENTKERNEL_TRANSCRIPTS``,
    else ``~/.agentkernel/transcripts``) to write a new file in, keeping the newest 200 runs there
    (:func:`~agentkernel.listeners.transcript.run_transcript`), or False for none.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system: str | None = None,
        history: Iterable[h.Item] | None = None,
        limits: Limits | None = None,
        guards: GuardConfig | None = None,
        stop: StopSignal | None = None,
        on_event: Listener | Iterable[Listener] | None = None,
        approve: Approver | None = None,
        transcript: str | os.PathLike[str] | bool = False,
        context_window: int | None = None,
        price: Pricer | None = None,
        instructions: Iterable[Instruction] = (),
        skills: Skills | None = None,
    ):
        self.model = model
        self.briefing = Briefing.of(system, instructions, skills, tools)
        self.tools = as_registry(self.briefing.tools)
        self.schemas = [t.schema() for t in self.tools.values()]  # the same for every request
        items = h.repair_history(history or [])
        # What each request carries: the history, compacted when it outgrows the window (see context.py).
        self.context = ContextView(
            items, window=context_window, reserve=getattr(model, "max_output_tokens", None),
            fixed=estimate(self.briefing.system + CONTEXT_FRAME) + estimate(json.dumps(self.schemas)),
            read_only=lambda name: name not in self.tools or self.tools[name].read_only,
        )
        self.record = RunHistory(items, self.context, lambda item: self.emit(ItemCommitted, item))
        self.limits = limits or Limits()
        self.guards = RunGuards(guards or GuardConfig())
        self.stop = stop or StopSignal()
        self.run_id = uuid.uuid4().hex[:12]
        self.transcript = open_transcript(transcript, self.run_id)
        # Everything that leaves the loop is an event told to these, redacted on the way (see events.py).
        self.listeners = Listeners.of(on_event, self.transcript)
        self.runner = ToolRunner(self.tools, approve, run_id=self.run_id, on_approval=self.listeners,
                                 on_start=lambda call: self.emit(ToolCallStarted, call),
                                 on_finish=lambda result: self.emit(ToolCallFinished, result))
        if not self.listeners:  # (a call per tool call saved)
            self.runner.on_start = self.runner.on_finish = self.runner.on_approval = None
        self.streaming = Response()  # the response being streamed: what arrived of it, if Stop cuts it
        # What the model's tokens cost (given, the model's own, or genai-prices'); None: unknown.
        self.meter = Meter(model, self.limits, price_for(model, price), self.context)
        if self.limits.max_cost and self.meter.price is None:
            raise no_price_error(model)
        self.state = RunState()
        self.compactor = Compactor(self.context, self.state, self.guards, self.emit, limits=self.limits,
                                   meter=self.meter, stream=self._stream, request=lambda items: ModelRequest(
                                       self.system_prompt, items, self.schemas, purpose="summary"))
        self.result: LoopResult | None = None
        self.deadline: float | None = None
        self._timeout: asyncio.Timeout | None = None  # the run's: expires at the deadline, or at once on Stop

    @property
    def usage(self) -> Usage:
        """The run's usage so far."""
        return self.meter.usage

    @property
    def history(self) -> list[h.Item]:
        """The run's history as committed so far."""
        return self.record.items

    # -- the loop -------------------------------------------------------------------------------------------

    async def run(self, prompt: str | None = None) -> LoopResult:
        """Run until an ending; ``prompt`` (if given) is appended as the next user message.

        Stop and the wall clock end the run through one ``asyncio.timeout`` around it (its deadline; Stop makes it
        expire at once), cancelling the task where it waits: the run ends ``aborted`` or ``hit_wall_clock`` with
        everything committed so far; a cancellation from anyone else still propagates."""
        loop = asyncio.get_running_loop()
        if self.limits.max_seconds:
            self.deadline = time.monotonic() + self.limits.max_seconds
        timeout = self._timeout = asyncio.timeout_at(loop.time() + self.limits.max_seconds
                                                     if self.limits.max_seconds else None)
        unsubscribe = self.stop.subscribe(self._cut)
        KERNEL.refresh()  # the secret set as the run starts (the runner keeps it current after each tool)
        self.emit(RunStarted, self.run_id, getattr(self.model, "name", type(self.model).__name__),
                  self.briefing.system, list(self.history), self.briefing.sources())
        try:
            async with timeout:
                trip = await self._run(prompt)
        except TimeoutError:
            if not timeout.expired():  # not ours
                raise
            trip = Trip("aborted", self.stop.reason) if self.stop.is_set() else self.limits.wall_clock_trip()
        except asyncio.CancelledError:
            # Cancelled from outside, maybe mid-commit: the only way the history can break its invariant.
            if h.history_problems(self.history):
                self.record.items = h.repair_history(self.history)
            self._finish(Trip("aborted", "the run was cancelled"))
            raise
        finally:
            self._timeout = None
            unsubscribe()
            self.runner.close()
        return self._finish(trip)

    def _cut(self) -> None:  # the stop signal was set: the run's timeout expires now
        if self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def _run(self, prompt: str | None) -> Trip:
        discover = getattr(self.model, "discover_context_window", None)
        if self.context.window is None and discover is not None:
            with contextlib.suppress(Exception):  # a model that cannot say: the window is learned from an overflow
                self.context.window = await discover()
        if prompt:
            self.record.commit(h.user_message(prompt))
        return await self._rounds()

    async def _rounds(self) -> Trip:
        next_yield = time.monotonic() + YIELD_EVERY
        while True:
            # A model and tools that never wait would hold the event loop for the whole run: let it run now and
            # then, so a Stop click and the panel's ticker get their turn. (Not every round: that costs more than
            # the rest of the loop's work for such a round.)
            if time.monotonic() >= next_yield:
                await asyncio.sleep(0)
                next_yield = time.monotonic() + YIELD_EVERY
            trip = await self._before_request()
            if isinstance(trip, Trip):
                return trip
            cap = trip
            self.state.rounds += 1
            self.emit(RoundStarted, self.state.rounds)
            try:
                response = await self._sample(cap)
            except _Stopped as stopped:  # the text-loop guard cut the response
                self._commit_text(self.streaming.text)  # what streamed so far; half-made calls are dropped
                return stopped.trip
            except asyncio.CancelledError:  # Stop, the wall clock, or from outside: likewise
                self._commit_text(self.streaming.text)
                raise
            except ContextOverflowError as e:
                self.state.rounds -= 1  # the request was refused, not answered: the round is tried again
                if trip := await self.compactor.overflowed(e):
                    return trip
                continue
            except GatewayBudgetError as e:
                return Trip("gateway_budget", str(e))
            except ModelError as e:
                return Trip("fatal_error", str(e) or type(e).__name__)
            if trip := await self._answered(response, cap):
                return trip

    async def _before_request(self) -> Trip | int | None:
        """The checks before a turn's request (Stop, the budgets, compaction at the high-water mark): a trip, or the
        output cap the cost budget leaves the request (None: no cap)."""
        if trip := self._stopped():
            return trip
        if trip := self.limits.check_before_request(self.usage):
            return trip
        if self.context.needs_compaction() and (trip := await self.compactor.compact("high water")):
            return trip
        return self.meter.cost_cap(lambda: self.context.fill)

    async def _answered(self, response: Response, cap: int | None) -> Trip | None:
        """Commit a turn's response and run its calls: a trip when the run ends here, else None (the next round)."""
        self.state.overflows = 0
        answer = self._commit_text(response.text)
        calls = [self.record.call(event, self.streaming.thinking) for event in response.calls]
        if response.truncated:
            return self._truncated(response.truncated, bool(answer.strip()), calls, self.meter.budget_cut(cap))
        if trip := self.limits.check_tokens(self.usage):
            self._commit_results(self.runner.unfinished(
                calls, f"not run: the loop stopped ({trip.status.upper()})", "not_run"))
            return trip
        if not calls:
            if answer.strip():
                return Trip("complete", "")
            return self.guards.record_empty_turn()  # an empty turn: ask again (the no-progress guard bounds this)
        return await self._run_tools(answer, calls)

    @property
    def system_prompt(self) -> str:
        """The system prompt as sent: as given until the view is compacted or the history shows the model a secret's
        marker (:meth:`~agentkernel.briefing.Briefing.as_sent` says how it changes then)."""
        return self.briefing.as_sent(compacted=bool(self.state.compactions), shows_secrets=self.record.shows_secrets)

    async def _sample(self, cap: int | None = None) -> Response:
        self.context.sent()
        request = ModelRequest(self.system_prompt, self.context.items, self.schemas, max_output_tokens=cap,
                               cache_key=self.run_id)
        response = await self._stream(request)
        if self.listeners:
            self.emit(ContextUpdated, self.context.fill, self.context.window)
        return response

    async def _stream(self, request: ModelRequest) -> Response:
        """Stream one request into a :class:`Response` (:attr:`streaming` meanwhile); usage into ``self.usage``,
        estimated when Stop, the wall clock or the text-loop guard cut the response before the server sent it."""
        self.guards.text_loop.reset()
        response = self.streaming = Response()
        try:
            await stream_into(response, self.model, request, text=self._heard_text,
                              progress=self.listeners if self.listeners else None)
        except (_Stopped, asyncio.CancelledError):  # cut short: the tokens it used still count
            self._count(request, response)
            raise
        self._count(request, response)
        return response

    def _heard_text(self, piece: str) -> None:
        """A turn's text piece: told to the listeners, and fed to the text-loop guard, which cuts it by raising."""
        if self.listeners:
            self.emit(TextDelta, valid_text(piece))
        if trip := self.guards.text_loop.feed(piece):  # cut: the text so far is committed
            raise _Stopped(trip)

    def _count(self, request: ModelRequest, response: Response) -> None:
        """Add a response's usage (checked, else estimated), priced, to the run's, and say so."""
        event = self.meter.count(request, response)
        self.emit(UsageUpdated, self.usage, event, request.purpose,
                  response.truncated or ("tool_calls" if response.calls else "stop"))

    # -- endings and tool rounds ------------------------------------------------------------------------------

    def _truncated(self, reason: str, had_text: bool, calls: list[ToolCall], budget: bool = False) -> Trip:
        """End the run on a response the server cut short: its calls may be incomplete, so none of them runs.

        ``budget``: the output cap was the cost budget's, so the run ends as ``hit_cost_cap``."""
        why = truncation(reason, getattr(self.model, "max_output_tokens", None))
        self._commit_results(self.runner.unfinished(calls, f"not run: {why}", "not_run"))
        tail = ("; the text that arrived is kept" if had_text else "") + (
            f"; {len(calls)} tool call{'s' * (len(calls) != 1)} not run" if calls else "")
        trip = self.limits.cost_trip(self.usage) if budget else Trip("truncated", why)
        return Trip(trip.status, trip.detail + tail)

    def _stopped(self) -> Trip | None:
        """The ending if Stop or the wall clock came: checked between awaits (the run's timeout cuts an await, unless
        what it cut swallowed the cancellation)."""
        if self.stop.is_set():
            return Trip("aborted", self.stop.reason)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return self.limits.wall_clock_trip()
        return None

    async def _run_tools(self, text: str, calls: list[ToolCall]) -> Trip | None:
        if trip := self._stopped():
            self._commit_results(self.runner.unfinished(calls, ABORTED_OUTPUT))
            return trip
        left = self.limits.tool_calls_left(self.state.tool_calls)
        runnable = calls if left is None else calls[:left]
        refused = calls[len(runnable):]
        self.state.tool_calls += len(runnable)
        results: list[ToolResult] = []
        try:
            await self.runner.run(runnable)
        finally:  # also when the task running the loop is cancelled: keep the outputs of the calls that finished
            results = self.runner.unfinished(runnable, ABORTED_OUTPUT)
            self._commit_results(results)
            refused_results = self.runner.unfinished(refused, "not run: tool-call budget exhausted", "not_run")
            self._commit_results(refused_results)
        trip = self.guards.record_round(text, results, refused_results)
        if trip is None and refused:
            trip = self.limits.tool_call_trip()
        return trip

    # -- committing ------------------------------------------------------------------------------------------

    def _commit_text(self, text: str) -> str:
        """Commit a message's text (if any); return it as committed."""
        text = self.record.text(text, self.streaming.thinking)
        if text:
            self.state.last_text = text
            self.emit(MessageDone, text)
        return text

    def _commit_results(self, results: list[ToolResult]) -> None:
        """Append each call's output, in request order, and count them."""
        self.record.results(results)
        self.state.tally(results)

    def _finish(self, trip: Trip) -> LoopResult:
        self.result = self.state.result(trip, self.history, self.usage, run_id=self.run_id,
                                        transcript=str(self.transcript.path) if self.transcript else None,
                                        sources=self.briefing.sources())
        self.emit(RunFinished, self.result)
        return self.result

    def emit(self, kind: Callable[..., Event], *fields: Any) -> None:
        """Tell the listeners (if any) ``kind(*fields)``; the event is only built when someone listens."""
        if self.listeners:
            self.listeners(kind(*fields))


async def run(prompt: str | None, *, model: Model, **options: Any) -> LoopResult:
    """Run the agent loop on ``prompt`` and return a :class:`LoopResult`; never raises for a guard, budget or abort.

    Options are those of :class:`AgentLoop`: ``tools``, ``system``, ``history``, ``limits``, ``guards``,
    ``stop``, ``on_event`` (a listener of the loop's :mod:`~agentkernel.events`, or a list of them), ``approve``,
    ``transcript``, ``context_window``, ``price``, ``instructions`` (see :mod:`agentkernel.instructions`), ``skills``
    (see :mod:`agentkernel.skills`).
    """
    return await AgentLoop(model, **options).run(prompt)
