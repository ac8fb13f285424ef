"""What a run has used (:class:`Usage`) and the optional budgets on it (:class:`Limits`), checked at fixed points."""

from __future__ import annotations

from dataclasses import dataclass

from .endings import Trip


@dataclass
class Usage:
    """Tokens as the API reported them, summed over the run's model requests."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class Limits:
    """Optional budgets for one run, all off by default; ``None`` (or ``0``) switches one off.

    The loop asks at fixed points: :meth:`check_before_request` before each model request, :meth:`check_tokens`
    after each response, :meth:`tool_calls_left` before a round's calls run; the wall clock is raced against
    every request and every round of tool calls.
    """

    max_iterations: int | None = None
    """Model requests per run."""
    max_tokens: int | None = None
    """Tokens per run, input and output together, as the API reports them (checked after each response)."""
    max_seconds: float | None = None
    """Wall-clock seconds per run; cuts an in-flight request or tool call."""
    max_tool_calls: int | None = None
    """Tool calls per run; calls asked for past it are not run and the run stops."""

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_tokens", "max_seconds", "max_tool_calls"):
            value = getattr(self, name)
            if value is not None and value < 0:
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

    def tool_calls_left(self, used: int) -> int | None:
        """How many more tool calls may run, or ``None`` for no limit."""
        if not self.max_tool_calls:
            return None
        return max(self.max_tool_calls - used, 0)

    def tool_call_trip(self) -> Trip:
        return Trip("hit_tool_call_cap", f"used all {self.max_tool_calls} tool calls")

    def wall_clock_trip(self) -> Trip:
        return Trip("hit_wall_clock", f"ran out of its {self.max_seconds:g} s of wall clock")
