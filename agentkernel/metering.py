"""What a run's requests cost: each response's usage as the server reported it when it can be right, else
estimated; priced and added to the run's; and the output cap the cost budget leaves the next request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .endings import Trip
from .models.base import Model, ModelRequest, UsageEvent
from .pricing import Pricer
from .record.context import ContextView
from .streaming import Response
from .usage import Limits, Usage

COUNT_RANGE = 16
"""A server's count of a request or a response that is more than this many times the view's estimate (characters /
4), or less than this share of it, cannot be right: a tokenizer gives at most one token per UTF-8 byte (a character
is at most four), and none packs 64 characters of text into a token."""

USAGE_SLACK = 4096
"""Tokens a server's count may hold beyond that (the special tokens of each message and tool, a small request's)."""

MAX_RESPONSE_TOKENS = 1_000_000
"""The most output tokens one response may be counted with when the loop knows no output cap (models write at most
some 128k)."""

OUTPUT_LIMIT_REASONS = ("length", "max_output_tokens", "max_tokens")
"""The truncation reasons (Chat ``finish_reason``, Responses ``incomplete_details.reason``) of an output cap."""


@dataclass
class Meter:
    """One run's usage: each response counted into :attr:`usage` (:meth:`count`), and the cost budget's say on the
    next request (:meth:`cost_cap`)."""

    model: Model
    limits: Limits
    price: Pricer | None
    context: ContextView
    usage: Usage = field(init=False)

    def __post_init__(self) -> None:
        self.usage = Usage(cost=None if self.price is None else 0.0)
        # Whether the model's input tokens are a count of the request (a scripted model's are not), read once.
        self.reports_prompt = not getattr(self.model, "estimates_usage", False)

    def count(self, request: ModelRequest, response: Response) -> UsageEvent:
        """Add a response's usage (checked, else estimated), priced, to the run's; the usage it was counted with."""
        event = response.usage = self.checked(request, response)
        self.usage.requests += 1
        self.usage.add(event, None if self.price is None else self.price.cost(event))
        if request.purpose == "turn" and self.reports_prompt and not event.estimated:
            self.context.observe(event.input_tokens)
        return event

    def checked(self, request: ModelRequest, response: Response) -> UsageEvent:
        """The response's usage as the server reported it, when it can be right; else an estimate.

        It can be right when it is :meth:`~UsageEvent.readable` and, from a server that counts the request, its
        input and its output are each within :data:`COUNT_RANGE` times the view's estimate of what was sent and of
        the text and calls streamed (the output may be more, up to twice the output cap sent, or
        :data:`MAX_RESPONSE_TOKENS` with none known: reasoning is not streamed).
        """
        event = response.usage
        if event is None or not event.readable():
            return self.estimated(request, response)
        if not self.reports_prompt:  # a scripted model's counts are words: nothing to hold them against
            return event
        sent, streamed = self.request_tokens(request), response.streamed_tokens()
        cap = self.output_cap(request)
        most_out = MAX_RESPONSE_TOKENS if cap is None else 2 * cap + USAGE_SLACK
        if (max(sent // COUNT_RANGE, 1) <= event.input_tokens <= COUNT_RANGE * sent + USAGE_SLACK
                and streamed // COUNT_RANGE <= event.output_tokens <= most_out):
            return event
        return self.estimated(request, response)

    def estimated(self, request: ModelRequest, response: Response) -> UsageEvent:
        """A response without usage that can be right (or cut before it came): characters / 4 of what was sent and
        streamed, with the view's room for the tokenizer; a response cut at the output cap used it all."""
        streamed = self.context.uncounted(response.streamed_tokens())
        cap = self.output_cap(request)
        if cap is not None:
            streamed = cap if response.truncated in OUTPUT_LIMIT_REASONS else min(streamed, cap)
        return UsageEvent(self.context.uncounted(self.request_tokens(request)), streamed, estimated=True)

    def request_tokens(self, request: ModelRequest) -> int:
        """The input tokens of ``request`` as the context view estimates them."""
        return self.context.tokens_of(None if request.purpose == "turn" else request.history)

    def output_cap(self, request: ModelRequest) -> int | None:
        """The output cap the request was sent with, as far as the loop knows (the model's own and the budget's)."""
        caps = [cap for cap in (getattr(self.model, "max_output_tokens", None), request.max_output_tokens) if cap]
        return min(caps) if caps else None

    def cost_cap(self, input_tokens: Callable[[], int]) -> Trip | int | None:
        """The cost budget's say on the next request (see :meth:`Limits.check_cost`), given its input estimate;
        before the server's first count, with room for a tokenizer that counts more than characters / 4."""
        if not self.limits.max_cost:
            return None
        return self.limits.check_cost(self.usage, self.price, self.context.uncounted(input_tokens()))

    def budget_cut(self, cap: int | None) -> bool:
        """Whether an output cap of ``cap`` was the cost budget's (lower than the model's own)."""
        own = getattr(self.model, "max_output_tokens", None)
        return cap is not None and (own is None or cap < own)


def truncation(reason: str, cap: int | None) -> str:
    """Why the server cut a response short, naming whose output cap it was (``cap``: this run's
    ``--max-output-tokens``, None: the server's own) when ``reason`` is an output cap's."""
    why = f"the server cut the model's response short ({reason})"
    if reason not in OUTPUT_LIMIT_REASONS:
        return why
    if cap:
        return (f"the model's response reached this run's cap of {cap} output tokens (--max-output-tokens {cap}; "
                f"raise it, or leave it out for the server's own limit) ({reason})")
    return f"{why}: its own output limit (this run set no --max-output-tokens)"

