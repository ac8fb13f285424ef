"""What a run has used (:class:`Usage`) and the optional budgets on it (:class:`Limits`), checked at fixed points."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .endings import Trip

if TYPE_CHECKING:
    from .models.base import UsageEvent
    from .pricing import Pricer

MILLION = 1_000_000

@dataclass
class Usage:
    """Tokens as the API reported them, summed over the run's model requests, and what they cost.

    ``input_tokens`` counts every input token, of which ``cache_read_tokens`` were read from the server's prompt
    cache and ``cache_write_tokens`` written to it; ``reasoning_tokens`` are part of ``output_tokens``.
    ``cost`` is in USD, ``None`` when the model's price is not known. ``estimated_requests`` counts the
    responses whose tokens the loop estimated: the server sent no usage that could be right (none, ``null``,
    ``"12abc"``, ``-995``, ``10**12``), or none before the response was cut short.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_requests: int = 0
    cost: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cached_share(self) -> float:
        """The share of input tokens read from the prompt cache (0 when there were none)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    def add(self, event: UsageEvent, cost: float | None) -> None:
        """Count one response's usage and its cost (``None``: unknown, which makes the run's cost unknown)."""
        self.input_tokens += event.input_tokens
        self.output_tokens += event.output_tokens
        self.cache_read_tokens += event.cache_read_tokens
        self.cache_write_tokens += event.cache_write_tokens
        self.reasoning_tokens += event.reasoning_tokens
        self.estimated_requests += event.estimated
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    @property
    def line(self) -> str:
        """``12,345 in (9,876 cached) · 1,234 out · $0.0123`` (or ``cost unknown``)."""
        cached = [f"{self.cache_read_tokens:,} cached"] if self.cache_read_tokens else []
        cached += [f"{self.cache_write_tokens:,} cache writes"] if self.cache_write_tokens else []
        parts = [f"{self.input_tokens:,} in" + (f" ({', '.join(cached)})" if cached else ""),
                 f"{self.output_tokens:,} out", "cost unknown" if self.cost is None else dollars(self.cost)]
        if self.estimated_requests:
            parts.append(self.estimated_note)
        return " · ".join(parts)

    @property
    def estimated_note(self) -> str:
        """``2 of 5 responses had no usable token count from the server; their tokens are estimated`` (or ``the
        response had ...; its tokens ...``, ``all 3 responses had ...``)."""
        n, of = self.estimated_requests, self.requests
        which = "the response" if of == 1 else f"all {of} responses" if n == of else f"{n} of {of} responses"
        return f"{which} had no usable token count from the server; {'its' if n == 1 else 'their'} tokens are estimated"


def dollars(cost: float) -> str:
    """``$0.0123``; ``$12.35`` from ten dollars up."""
    return f"${cost:.2f}" if cost >= 10 else f"${cost:.4f}"


@dataclass
class Limits:
    """Optional budgets for one run, all off by default; ``None`` (or ``0``) switches one off.

    The loop asks at fixed points: :meth:`check_before_request` before each model request (and
    :meth:`check_cost` with that request's input), :meth:`check_tokens` after each response,
    :meth:`tool_calls_left` before a round's calls run; the wall clock is raced against every request and every
    round of tool calls.
    """

    max_iterations: int | None = None
    """Model requests per run."""
    max_tokens: int | None = None
    """Tokens per run, input and output together, as the API reports them (checked after each response)."""
    max_seconds: float | None = None
    """Wall-clock seconds per run; cuts an in-flight request or tool call."""
    max_tool_calls: int | None = None
    """Tool calls per run; calls asked for past it are not run and the run stops."""
    max_cost: float | None = None
    """USD per run (it needs the model's price): a request whose input the rest cannot pay is not made, and each
    response's output cap is lowered to what the rest can pay."""

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_tokens", "max_seconds", "max_tool_calls", "max_cost"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"Limits.{name} must be None (off) or at least 0, not {value!r}")

    def check_before_request(self, usage: Usage) -> Trip | None:
        """Stop before another model request if the requests or the tokens are used up."""
        if self.max_iterations and usage.requests >= self.max_iterations:
            return Trip("hit_iteration_cap", f"used all {self.max_iterations} model requests")
        return self.check_tokens(usage)

    def check_tokens(self, usage: Usage) -> Trip | None:
        if self.max_tokens and usage.total_tokens >= self.max_tokens:
            return Trip("hit_token_cap", f"used {usage.total_tokens} tokens of a budget of {self.max_tokens}")
        return None

    def check_cost(self, usage: Usage, price: Pricer | None, input_tokens: int) -> Trip | int | None:
        """Before a request of about ``input_tokens``: a trip when the cost budget cannot pay its input (priced as
        if none were cached) and at least one output token, else the output cap that keeps the run within the budget
        (``None``: no cost budget)."""
        if not self.max_cost or price is None:
            return None
        from .models.base import UsageEvent

        spent = usage.cost or 0.0
        left = self.max_cost - spent - price.cost(UsageEvent(input_tokens=input_tokens))
        per_token = price.cost(UsageEvent(input_tokens=input_tokens, output_tokens=MILLION)) / MILLION \
            - price.cost(UsageEvent(input_tokens=input_tokens)) / MILLION
        cap = math.floor(left / per_token) if per_token > 0 else None
        if left <= 0 or (cap is not None and cap < 1):
            return Trip("hit_cost_cap", f"spent {dollars(spent)} of a budget of {dollars(self.max_cost)}; the next "
                                        f"request (about {input_tokens:,} input tokens) would cost more than is left")
        return cap

    def cost_trip(self, usage: Usage) -> Trip:
        """The run's response was cut at the output cap the cost budget set."""
        spent, budget = dollars(usage.cost or 0.0), dollars(self.max_cost or 0.0)
        return Trip("hit_cost_cap", f"spent {spent} of a budget of {budget}: the last response was cut where the "
                                    "budget ended")

    def tool_calls_left(self, used: int) -> int | None:
        """How many more tool calls may run, or ``None`` for no limit."""
        if not self.max_tool_calls:
            return None
        return max(self.max_tool_calls - used, 0)

    def tool_call_trip(self) -> Trip:
        return Trip("hit_tool_call_cap", f"used all {self.max_tool_calls} tool calls")

    def wall_clock_trip(self) -> Trip:
        return Trip("hit_wall_clock", f"ran out of its {self.max_seconds:g} s of wall clock")

