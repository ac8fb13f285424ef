"""The sampling loop: request -> tool calls -> outputs -> checks -> next round.

There is no round cap. A run ends when a round has no tool calls, the user stops it, the model fails, or a
guard or budget in :mod:`agentkernel.guards` trips. Whatever the ending, every committed ``function_call`` has
its ``function_call_output`` in the history before the run returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .endings import Trip
from .events import (
    ContextCompacted,
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
from .guards import FailureGuard, GuardConfig, NoProgressGuard, RepeatedCallGuard, TextLoopGuard
from .instructions import Instruction, instructions_prompt
from .models.base import (
    THINKING_KEY,
    ContextOverflowError,
    FunctionCallEvent,
    FunctionCallProgress,
    GatewayBudgetError,
    Model,
    ModelError,
    ModelRequest,
    TextDelta,
    Thinking,
    Truncation,
    UsageEvent,
)
from .pricing import Pricer, no_price_error, price_for
from .record import history as h
from .record.context import CONTEXT_FRAME, Compaction, ContextView, estimate, item_tokens
from .record.transcript import Transcript, run_transcript, transcript_dir
from .result import LoopResult
from .secrets import KERNEL, MARKER_START, SECRETS_FRAME, redact_text
from .skills import Skill, Skills, load_skill_tool, skills_prompt
from .stop import StopSignal
from .text import short, valid_text
from .tools import Approver, Tool, ToolCall, ToolResult, ToolRunner, as_registry
from .usage import Limits, Usage

DEFAULT_SYSTEM_PROMPT = """\
You are an assistant working inside a bounded tool-use loop in a Jupyter notebook.
Each tool call costs time and budget, and the loop stops if you repeat a call that already gave you its answer.
Choose few, well-aimed calls; read what a tool returns before calling again; answer as soon as you can.
If you cannot finish, say what you found so far and what you would still need."""

ABORTED_OUTPUT = "aborted: the run was stopped before this call finished"

UNCOUNTED_MARGIN = 1.5
"""How many more tokens than characters / 4 the cost budget allows for before the server has counted a request, and
an estimated response is counted with (characters / 4 undercounts JSON and code)."""

COUNT_RANGE = 16
"""A server's count of a request or a response that is more than this many times the view's estimate (characters /
4), or less than this share of it, cannot be right: a tokenizer gives at most one token per UTF-8 byte (a character
is at most four), and none packs 64 characters of text into a token."""

USAGE_SLACK = 4096
"""Tokens a server's count may hold beyond that (the special tokens of each message and tool, a small request's)."""

MAX_RESPONSE_TOKENS = 1_000_000
"""The most output tokens one response may be counted with when the loop knows no output cap (models write at most
some 128k)."""

YIELD_EVERY = 0.005
"""Seconds a run may go without letting the event loop run (when neither its model nor its tools ever wait)."""


OUTPUT_LIMIT_REASONS = ("length", "max_output_tokens", "max_tokens")
"""The truncation reasons (Chat ``finish_reason``, Responses ``incomplete_details.reason``) of an output cap."""


@dataclass
class Response:
    """What one model request gave: its text, the calls it asked for, the server's reason if it cut it short, and
    its usage."""

    pieces: list[str] = field(default_factory=list)
    calls: list[FunctionCallEvent] = field(default_factory=list)
    truncated: str | None = None
    usage: UsageEvent | None = None
    """As the server reported it, or estimated (see :class:`UsageEvent`)."""
    thinking: list[dict[str, Any]] = field(default_factory=list)
    """The :class:`Thinking` blocks it streamed, until the turn's first item takes them."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)


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
    (:func:`~agentkernel.record.transcript.run_transcript`), or False for none.
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
        # The project's instructions and the skills' names go into the system prompt (redacted, never compacted
        # away); a skill's body only through load_skill.
        secrets = KERNEL.refresh()
        self.instructions = [Instruction(i.source, secrets.redact(i.text)) for i in instructions]
        self.skills = [Skill(s.name, secrets.redact(s.description), s.folder, s.body)
                       for s in (skills.found if skills else [])]
        if self.skills and skills is not None:
            tools = [*tools, load_skill_tool(skills)]
        self.tools = as_registry(tools)
        self.schemas = [t.schema() for t in self.tools.values()]  # the same for every request
        self.system = "\n\n".join(part for part in (
            DEFAULT_SYSTEM_PROMPT if system is None else system,
            instructions_prompt(self.instructions), skills_prompt(self.skills)) if part)
        self.history: list[h.Item] = h.repair_history(history or [])
        # Has the model been shown a secret's marker? From then on the system prompt says what one is.
        self.shows_secrets = any(_shows_secret(item) for item in self.history)
        # What each request carries: the history, compacted when it outgrows the window (see context.py).
        self.context = ContextView(
            self.history, window=context_window, reserve=getattr(model, "max_output_tokens", None),
            fixed=estimate(self.system + CONTEXT_FRAME) + estimate(json.dumps(self.schemas)),
            read_only=lambda name: name not in self.tools or self.tools[name].read_only,
        )
        self.compactions: list[Compaction] = []
        # Whether the model's input tokens are a count of the request (a scripted model's are not), read once.
        self.reports_prompt = not getattr(model, "estimates_usage", False)
        self.overflows = 0  # requests refused as too long since the last one that was answered
        self.signatures: dict[str, tuple[str, str, str]] = {}  # each call's repeated-call signature, by call_id
        self.call_ids = {item["call_id"] for item in self.history if item.get("type") == "function_call"}
        self.limits = limits or Limits()
        guards = guards or GuardConfig()
        self.repeats = RepeatedCallGuard(guards.repeat_limit)
        self.no_progress = NoProgressGuard(guards.stuck_window, guards.max_stale_turns)
        self.failures = FailureGuard(guards.max_consecutive_failures)
        self.text_loop = TextLoopGuard(guards.text_repeats)
        self.stop = stop or StopSignal()
        self.run_id = uuid.uuid4().hex[:12]
        if transcript is True or transcript and os.path.isdir(transcript):  # a folder: a new file there
            transcript = run_transcript(transcript_dir() if transcript is True else transcript, self.run_id)
        self.transcript = Transcript(transcript) if transcript else None
        # Everything that leaves the loop is an event told to these, redacted on the way (see events.py).
        if callable(on_event) and not isinstance(on_event, list):
            on_event = [on_event]
        self.listeners = Listeners(on_event or [])
        if self.transcript is not None:
            self.listeners.append(self.transcript)
        self.runner = ToolRunner(self.tools, approve, run_id=self.run_id,
                                 on_start=lambda call: self.emit(ToolCallStarted, call),
                                 on_finish=lambda result: self.emit(ToolCallFinished, result))
        if not self.listeners:  # (a call per tool call saved)
            self.runner.on_start = self.runner.on_finish = None
        self.streaming = Response()  # the response being streamed: what arrived of it, if Stop cuts it
        # What the model's tokens cost (given, the model's own, or genai-prices'); None: unknown.
        self.price = price_for(model, price)
        if self.limits.max_cost and self.price is None:
            raise no_price_error(model)
        self.usage = Usage(cost=None if self.price is None else 0.0)
        self.rounds = 0
        self.tool_calls = 0
        self.denied_calls = 0
        self.findings: list[dict[str, Any]] = []
        self.last_text: str | None = None
        self.result: LoopResult | None = None
        self.deadline: float | None = None
        self._timeout: asyncio.Timeout | None = None  # the run's: expires at the deadline, or at once on Stop

    # -- the loop -------------------------------------------------------------------------------------------

    async def run(self, prompt: str | None = None) -> LoopResult:
        """Run until an ending; ``prompt`` (if given) is appended as the next user message.

        Stop and the wall clock end the run through one ``asyncio.timeout`` around it: the deadline is its time,
        and Stop makes it expire at once. Either cancels the task where it waits (a model request is disconnected,
        a tool round's unfinished calls are abandoned), and the run ends ``aborted`` or ``hit_wall_clock`` with
        everything committed so far; a cancellation from anyone else still propagates.
        """
        loop = asyncio.get_running_loop()
        if self.limits.max_seconds:
            self.deadline = time.monotonic() + self.limits.max_seconds
        timeout = self._timeout = asyncio.timeout_at(loop.time() + self.limits.max_seconds
                                                     if self.limits.max_seconds else None)
        unsubscribe = self.stop.subscribe(self._cut)
        KERNEL.refresh()  # the secret set as the run starts (the runner keeps it current after each tool)
        self.emit(RunStarted, self.run_id, getattr(self.model, "name", type(self.model).__name__), self.system,
                  list(self.history), self._briefing())
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
                self.history = h.repair_history(self.history)
            self._finish(Trip("aborted", "the run was cancelled"))
            raise
        finally:
            self._timeout = None
            unsubscribe()
            self.runner.close()
        return self._finish(trip)

    def _cut(self) -> None:
        """The stop signal was set: the run's timeout expires now."""
        if self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def _run(self, prompt: str | None) -> Trip:
        discover = getattr(self.model, "discover_context_window", None)
        if self.context.window is None and discover is not None:
            with contextlib.suppress(Exception):  # a model that cannot say: the window is learned from an overflow
                self.context.window = await discover()
        if prompt:
            self.commit(h.user_message(prompt))
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
            if trip := self._stopped():
                return trip
            if trip := self.limits.check_before_request(self.usage):
                return trip
            if self.context.needs_compaction() and (trip := await self._compact("high water")):
                return trip
            cap = self._cost_cap(lambda: self.context.fill)
            if isinstance(cap, Trip):
                return cap
            self.rounds += 1
            self.emit(RoundStarted, self.rounds)

            try:
                response = await self._sample(cap)
            except _Stopped as stopped:  # the text-loop guard cut the response
                self._commit_text(self.streaming.text)  # what streamed so far; half-made calls are dropped
                return stopped.trip
            except asyncio.CancelledError:  # Stop, the wall clock, or from outside: likewise
                self._commit_text(self.streaming.text)
                raise
            except ContextOverflowError as e:
                self.rounds -= 1  # the request was refused, not answered: the round is tried again
                if trip := await self._overflowed(e):
                    return trip
                continue
            except GatewayBudgetError as e:
                return Trip("gateway_budget", str(e))
            except ModelError as e:
                return Trip("fatal_error", str(e) or type(e).__name__)
            self.overflows = 0
            answer = self._commit_text(response.text)
            calls = [self._commit_call(event) for event in response.calls]
            if response.truncated:
                return self._truncated(response.truncated, bool(answer.strip()), calls, self._budget_cut(cap))

            if trip := self.limits.check_tokens(self.usage):
                self._commit_results(self.runner.unfinished(
                    calls, f"not run: the loop stopped ({trip.status.upper()})", "not_run"))
                return trip
            if not calls:
                if answer.strip():
                    return Trip("complete", "")
                if trip := self.no_progress.record_turn("", []):
                    return trip
                continue  # an empty turn: ask again (the no-progress guard bounds this)

            if trip := await self._run_tools(answer, calls):
                return trip

    @property
    def system_prompt(self) -> str:
        """The system prompt as sent: once the view has been compacted, it tells the model how (``CONTEXT_FRAME``).

        Not before: a run that never compacts sends the system prompt it was given, so its prompt (and a server's
        cache of it, and a recorded cassette) is what it would be without a window. Likewise, once the history shows
        the model a secret's marker (``[secret $NAME]``, see :mod:`agentkernel.secrets`) the prompt says
        what one is (``SECRETS_FRAME``); a run that shows none sends its prompt unchanged.
        """
        if not (self.compactions or self.shows_secrets):
            return self.system
        frames = [CONTEXT_FRAME] * bool(self.compactions) + [SECRETS_FRAME] * self.shows_secrets
        return "\n\n".join([self.system, *frames] if self.system else frames)

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
        self.text_loop.reset()
        response = self.streaming = Response()
        try:
            await self._stream_into(response, request)
        except (_Stopped, asyncio.CancelledError):  # cut short: the tokens it used still count
            self._count(request, response)
            raise
        self._count(request, response)
        return response

    async def _stream_into(self, response: Response, request: ModelRequest) -> None:
        turn = request.purpose == "turn"
        async with contextlib.aclosing(self.model.stream(request)) as stream:  # an abort disconnects at once
            while True:
                try:
                    event = await anext(stream)
                except StopAsyncIteration:
                    return
                except ModelError:
                    raise
                except Exception as error:  # a model that fails its own way: the run ends with a message all the same
                    raise ModelError(model_fault(self.model, error)) from error
                if isinstance(event, TextDelta):
                    response.pieces.append(event.text)
                    if self.listeners and turn:  # validated for the listener; the history gets the
                        self.emit(TextDelta, valid_text(event.text))  # joined text
                    if turn and (trip := self.text_loop.feed(event.text)):  # cut: the text so far is committed
                        raise _Stopped(trip)
                elif isinstance(event, FunctionCallProgress):
                    if self.listeners and turn:  # the model's own event, passed on as it is
                        self.listeners(event)
                elif isinstance(event, FunctionCallEvent):
                    response.calls.append(event)
                elif isinstance(event, UsageEvent):  # counted when the response ends (a later one replaces it)
                    response.usage = event
                elif isinstance(event, Truncation):
                    response.truncated = response.truncated or event.reason
                elif isinstance(event, Thinking):
                    response.thinking.extend(event.blocks)

    # -- usage and cost ---------------------------------------------------------------------------------------

    def _count(self, request: ModelRequest, response: Response) -> None:
        """Add a response's usage (checked, else estimated), priced, to the run's."""
        event = response.usage = self._checked_usage(request, response)
        self.usage.requests += 1
        self.usage.add(event, None if self.price is None else self.price.cost(event))
        if request.purpose == "turn" and self.reports_prompt and not event.estimated:
            self.context.observe(event.input_tokens)
        self.emit(UsageUpdated, self.usage, event, request.purpose,
                  response.truncated or ("tool_calls" if response.calls else "stop"))

    def _checked_usage(self, request: ModelRequest, response: Response) -> UsageEvent:
        """The response's usage as the server reported it, when it can be right; else an estimate.

        It can be right when it is :meth:`~UsageEvent.readable` and, from a server that counts the request, its
        input and its output are each within :data:`COUNT_RANGE` times the view's estimate of what was sent and of
        the text and calls streamed (the output may be more, up to twice the output cap sent, or
        :data:`MAX_RESPONSE_TOKENS` with none known: reasoning is not streamed).
        """
        event = response.usage
        if event is None or not event.readable():
            return self._estimated_usage(request, response)
        if not self.reports_prompt:  # a scripted model's counts are words: nothing to hold them against
            return event
        sent, streamed = self._request_tokens(request), self._streamed_tokens(response)
        cap = self._output_cap(request)
        most_out = MAX_RESPONSE_TOKENS if cap is None else 2 * cap + USAGE_SLACK
        if (max(sent // COUNT_RANGE, 1) <= event.input_tokens <= COUNT_RANGE * sent + USAGE_SLACK
                and streamed // COUNT_RANGE <= event.output_tokens <= most_out):
            return event
        return self._estimated_usage(request, response)

    def _estimated_usage(self, request: ModelRequest, response: Response) -> UsageEvent:
        """A response without usage that can be right (or cut before it came): characters / 4 of what was sent and
        streamed, with :meth:`_uncounted`'s room for the tokenizer; a response cut at the output cap used it all."""
        streamed = self._uncounted(self._streamed_tokens(response))
        cap = self._output_cap(request)
        if cap is not None:
            streamed = cap if response.truncated in OUTPUT_LIMIT_REASONS else min(streamed, cap)
        return UsageEvent(self._uncounted(self._request_tokens(request)), streamed, estimated=True)

    @staticmethod
    def _streamed_tokens(response: Response) -> int:
        return estimate(response.text) + sum(estimate(call.arguments) for call in response.calls)

    def _output_cap(self, request: ModelRequest) -> int | None:
        """The output cap the request was sent with, as far as the loop knows (the model's own and the budget's)."""
        caps = [cap for cap in (getattr(self.model, "max_output_tokens", None), request.max_output_tokens) if cap]
        return min(caps) if caps else None

    def _uncounted(self, tokens: int) -> int:
        """``tokens`` as the view estimates them, with room for a tokenizer that counts more than characters / 4
        (:data:`UNCOUNTED_MARGIN`) until the server has counted a request of this view."""
        return tokens if self.context.base is not None else math.ceil(UNCOUNTED_MARGIN * tokens)

    def _request_tokens(self, request: ModelRequest) -> int:
        """The input tokens of ``request`` as the context view estimates them."""
        if request.purpose == "turn":
            return self.context.fill
        return round(self.context.ratio * (self.context.fixed + sum(map(item_tokens, request.history))))

    def _cost_cap(self, input_tokens: Callable[[], int]) -> Trip | int | None:
        """The cost budget's say on the next request (see :meth:`Limits.check_cost`), given its input estimate;
        before the server's first count, with room for a tokenizer that counts more than characters / 4."""
        if not self.limits.max_cost:
            return None
        return self.limits.check_cost(self.usage, self.price, self._uncounted(input_tokens()))

    def _budget_cut(self, cap: int | None) -> bool:
        """Whether an output cap of ``cap`` was the cost budget's (lower than the model's own)."""
        own = getattr(self.model, "max_output_tokens", None)
        return cap is not None and (own is None or cap < own)

    # -- the context window -----------------------------------------------------------------------------------

    async def _overflowed(self, error: ContextOverflowError) -> Trip | None:
        """The server refused a request as too long: learn the window from what it said, compact, and retry; end
        the run when compacting twice in a row did not make the request fit."""
        self.overflows += 1
        self.context.learn(error.window, error.prompt_tokens)
        if self.overflows > 2:
            return Trip("context_overflow", f"the server still refused the request as too long after "
                        f"{self.overflows - 1} compactions in a row: {error}")
        return await self._compact("overflow")

    async def _compact(self, reason: str) -> Trip | None:
        """Compact the view (see :meth:`ContextView.compact`); a trip when it still cannot fit or Stop came."""
        compaction = await self.context.compact(self._summarize, reason)
        self.compactions.append(compaction)
        for call_id in compaction.elided:
            self._forgive(call_id)
        self.emit(ContextCompacted, compaction)
        self.emit(ContextUpdated, compaction.tokens_after, self.context.window)
        if not compaction.fits:
            return Trip("context_overflow", (
                f"even compacted, the request needs about {compaction.tokens_after:,} tokens and "
                f"{self.context.usable:,} fit ({self.context.window:,}-token window less {self.context.reserve:,} "
                "for the answer): the system prompt, the tools and the last turn alone are too long"))
        return None

    async def _summarize(self, items: list[h.Item]) -> str | None:
        """Ask the model for a note on ``items`` (compaction's second stage); ``None`` when it cannot be had.

        The request counts towards the budgets like any other; past them, or on a model error, there is no note.
        """
        if self.limits.check_before_request(self.usage):
            return None
        request = ModelRequest(self.system_prompt, items, self.schemas, purpose="summary")
        cap = self._cost_cap(lambda: self._request_tokens(request))
        if isinstance(cap, Trip):
            return None
        request.max_output_tokens = cap
        try:
            response = await self._stream(request)
        except ModelError:
            return None
        return valid_text(response.text)

    def _forgive(self, call_id: str) -> None:
        """An output the model no longer sees may be fetched again once without counting as a repeat."""
        signature = self.signatures.get(call_id)
        if signature is not None:
            self.repeats.forgive(*signature)

    def _truncated(self, reason: str, had_text: bool, calls: list[ToolCall], budget: bool = False) -> Trip:
        """End the run on a response the server cut short: its calls may be incomplete, so none of them runs.

        ``budget``: the output cap was the cost budget's, so the run ends as ``hit_cost_cap``."""
        why = f"the server cut the model's response short ({reason})"
        if reason in OUTPUT_LIMIT_REASONS:  # whose cap was it: this run's max_output_tokens, or the server's own
            cap = getattr(self.model, "max_output_tokens", None)
            why = (f"the model's response reached this run's cap of {cap} output tokens (--max-output-tokens {cap}; "
                   f"raise it, or leave it out for the server's own limit) ({reason})" if cap else
                   f"{why}: its own output limit (this run set no --max-output-tokens)")
        self._commit_results(self.runner.unfinished(calls, f"not run: {why}", "not_run"))
        kept = "; the text that arrived is kept" if had_text else ""
        skipped = f"; {len(calls)} tool call{'s' * (len(calls) != 1)} not run" if calls else ""
        if budget:
            trip = self.limits.cost_trip(self.usage)
            return Trip(trip.status, trip.detail + kept + skipped)
        return Trip("truncated", why + kept + skipped)

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
        left = self.limits.tool_calls_left(self.tool_calls)
        runnable = calls if left is None else calls[:left]
        refused = calls[len(runnable):]
        self.tool_calls += len(runnable)
        results: list[ToolResult] = []
        try:
            await self.runner.run(runnable)
        finally:  # also when the task running the loop is cancelled: keep the outputs of the calls that finished
            results = self.runner.unfinished(runnable, ABORTED_OUTPUT)
            self._commit_results(results)
            refused_results = self.runner.unfinished(refused, "not run: tool-call budget exhausted", "not_run")
            self._commit_results(refused_results)

        trip = None
        outcomes = []
        for r in results:
            call = r.call
            self.signatures[call.call_id] = signature = (call.name, call.normalized, r.output)
            outcomes.append(signature)
            trip = trip or self.repeats.record(*signature) or self.no_progress.record_call(call.name, call.normalized)
        outcomes += [(r.call.name, r.call.normalized, r.output) for r in refused_results]
        trip = trip or self.no_progress.record_turn(text, outcomes)
        trip = trip or self.failures.record_round(sum(r.status == "error" for r in results), len(results))
        if trip is None and refused:
            trip = self.limits.tool_call_trip()
        return trip

    # -- committing ------------------------------------------------------------------------------------------

    def commit(self, item: h.Item) -> None:
        item = h.valid_item(item)
        self.shows_secrets = self.shows_secrets or _shows_secret(item)
        self.history.append(item)
        self.context.append(item)
        self.emit(ItemCommitted, item)

    def _turn_item(self, item: h.Item) -> h.Item:
        """The turn's first item carries the :class:`Thinking` blocks its response streamed (if any)."""
        if self.streaming.thinking:
            item[THINKING_KEY], self.streaming.thinking = self.streaming.thinking, []
        return item

    def _commit_call(self, event: FunctionCallEvent) -> ToolCall:
        """Commit a requested call under its final call_id: a model (or server) that leaves a call_id empty or
        reuses one would break the call/output matching."""
        call_id = valid_text(event.call_id)
        base, n = call_id or "call", len(self.history)
        while not call_id or call_id in self.call_ids:
            call_id, n = f"{base}_{n}", n + 1
        self.call_ids.add(call_id)
        call = ToolCall(call_id, valid_text(event.name), valid_text(event.arguments))
        self.commit(self._turn_item(h.function_call(call.call_id, call.name, call.arguments)))
        return call

    def _commit_text(self, text: str) -> str:
        """Commit a message's text (if any); return it as committed."""
        text = valid_text(text)
        if text:
            self.commit(self._turn_item(h.assistant_message(text)))
            self.last_text = text
            self.emit(MessageDone, text)
        return text

    def _commit_results(self, results: list[ToolResult]) -> None:
        """Append each call's output, in request order."""
        for r in results:
            self.commit(h.function_call_output(r.call_id, r.output, synthetic=r.synthetic, images=list(r.images)))
            if r.status == "ok":
                self.findings.append({"tool": r.name, "arguments": r.arguments, "output": r.output})
            self.denied_calls += r.status == "denied"

    def _finish(self, trip: Trip) -> LoopResult:
        result = LoopResult(
            status=trip.status,
            answer=self.last_text,
            history=self.history,
            usage=self.usage,
            rounds=self.rounds,
            tool_calls=self.tool_calls,
            denied_calls=self.denied_calls,
            partial_findings=self.findings,
            detail=valid_text(trip.detail),
            compactions=len(self.compactions),
            run_id=self.run_id,
            transcript=str(self.transcript.path) if self.transcript else None,
            **self._briefing(),
        )
        self.result = result
        self.emit(RunFinished, result)
        return result

    def _briefing(self) -> dict[str, list[str]]:
        """Where the run's instructions came from and which skills it was offered (for the result and transcript)."""
        return {"instructions": [i.source for i in self.instructions], "skills": [s.name for s in self.skills]}

    def emit(self, kind: Callable[..., Event], *fields: Any) -> None:
        """Tell the listeners (if any) ``kind(*fields)``; the event is only built when someone listens."""
        if self.listeners:
            self.listeners(kind(*fields))


def model_fault(model: Model, error: Exception) -> str:
    """The message of a run ended by a model that raised something other than a :class:`ModelError`."""
    name = getattr(model, "name", type(model).__name__)
    secrets = getattr(model, "secrets", None)
    text = f"the model {name} failed: {type(error).__name__}: {short(str(error), 200)}"
    return redact_text(text, secrets() if callable(secrets) else ())


def _shows_secret(item: h.Item) -> bool:
    """Whether a user message or a tool output shows the model a secret's marker."""
    text = item.get("output") if item.get("type") == "function_call_output" else item.get("content")
    return isinstance(text, str) and MARKER_START in text


async def run(prompt: str | None, *, model: Model, **options: Any) -> LoopResult:
    """Run the agent loop on ``prompt`` and return a :class:`LoopResult`; never raises for a guard, budget or abort.

    Options are those of :class:`AgentLoop`: ``tools``, ``system``, ``history``, ``limits``, ``guards``,
    ``stop``, ``on_event`` (a listener of the loop's :mod:`~agentkernel.events`, or a list of them), ``approve``,
    ``transcript``, ``context_window``, ``price``, ``instructions`` (see :mod:`agentkernel.instructions`), ``skills``
    (see :mod:`agentkernel.skills`).
    """
    return await AgentLoop(model, **options).run(prompt)
