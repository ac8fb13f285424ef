"""Keeping a run's requests inside the model's context window: the view compacted at its high-water mark, and when a
server refuses a request as too long (the window learned from what it said, then compacted and retried)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .endings import Trip
from .events import ContextCompacted, ContextUpdated
from .guards import RunGuards
from .metering import Meter
from .models.base import ContextOverflowError, ModelError, ModelRequest
from .record import history as h
from .record.context import ContextView
from .run_state import RunState
from .streaming import Response
from .text import valid_text
from .usage import Limits


class Compactor:
    """Compacts a run's :class:`ContextView`, asking the model for a note on what it drops (:meth:`summarize`:
    ``request(items)`` makes the request, ``stream`` sends it); ``emit`` tells the listeners."""

    def __init__(self, context: ContextView, state: RunState, guards: RunGuards, emit: Callable[..., None], *,
                 limits: Limits, meter: Meter, stream: Callable[[ModelRequest], Awaitable[Response]],
                 request: Callable[[list[h.Item]], ModelRequest]):
        self.context, self.state, self.guards, self.emit = context, state, guards, emit
        self.limits, self.meter, self.stream, self.request = limits, meter, stream, request

    async def overflowed(self, error: ContextOverflowError) -> Trip | None:
        """The server refused a request as too long: learn the window from what it said, compact, and retry; end
        the run when compacting twice in a row did not make the request fit."""
        self.state.overflows += 1
        self.context.learn(error.window, error.prompt_tokens)
        if self.state.overflows > 2:
            return Trip("context_overflow", f"the server still refused the request as too long after "
                        f"{self.state.overflows - 1} compactions in a row: {error}")
        return await self.compact("overflow")

    async def compact(self, reason: str) -> Trip | None:
        """Compact the view (see :meth:`ContextView.compact`); a trip when it still cannot fit."""
        compaction = await self.context.compact(self.summarize, reason)
        self.state.compactions.append(compaction)
        for call_id in compaction.elided:
            self.guards.forgive(call_id)
        self.emit(ContextCompacted, compaction)
        self.emit(ContextUpdated, compaction.tokens_after, self.context.window)
        if not compaction.fits:
            return Trip("context_overflow", (
                f"even compacted, the request needs about {compaction.tokens_after:,} tokens and "
                f"{self.context.usable:,} fit ({self.context.window:,}-token window less {self.context.reserve:,} "
                "for the answer): the system prompt, the tools and the last turn alone are too long"))
        return None

    async def summarize(self, items: list[h.Item]) -> str | None:
        """Ask the model for a note on ``items`` (compaction's second stage); ``None`` when it cannot be had.

        The request counts towards the budgets like any other; past them, or on a model error, there is no note.
        """
        if self.limits.check_before_request(self.meter.usage):
            return None
        request = self.request(items)
        cap = self.meter.cost_cap(lambda: self.meter.request_tokens(request))
        if isinstance(cap, Trip):
            return None
        request.max_output_tokens = cap
        try:
            response = await self.stream(request)
        except ModelError:
            return None
        return valid_text(response.text)

