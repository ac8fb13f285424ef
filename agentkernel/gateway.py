"""An LLM gateway's budget for the run's key: what the key has spent and has left, and its "budget exceeded" answer.

A gateway such as the LiteLLM proxy gives each user a virtual key with a ``max_budget``; ``GET /key/info`` with
the key tells its ``spend`` and ``max_budget`` (``{"key": ..., "info": {"spend": 0.12, "max_budget": 1.0, ...}}``),
and a request past the budget is refused with ``{"error": {"type": "budget_exceeded", "message": "Budget has been
exceeded! ..."}}`` (HTTP 429 in today's proxy, 400 in older ones). The gateway is reached over HTTP only: nothing of
it is imported.
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

from .errors import AgentConfigError
from .usage import Limits

BUDGET_TYPES = ("budget_exceeded",)
"""The ``error.type`` a gateway's budget refusal carries (LiteLLM's ``ProxyErrorTypes.budget_exceeded``)."""
BUDGET_WORDS = ("budget has been exceeded", "budget exceeded")
"""What the refusal's message says, for a gateway that sets no type."""
INFO_SECONDS = 3.0


@dataclass(frozen=True)
class KeyBudget:
    """A gateway key's money: what it has spent and its budget (None: the key has no budget), in USD."""

    spend: float
    max_budget: float | None
    resets: str | None = None
    """When the budget is next reset (the gateway's ``budget_reset_at``), if it is."""

    @property
    def left(self) -> float | None:
        """What the key can still spend (never below 0), None without a budget."""
        return None if self.max_budget is None else max(0.0, self.max_budget - self.spend)

    def line(self) -> str:
        """``the gateway key has spent $0.1200 of $1.0000 ($0.8800 left)``."""
        if self.max_budget is None:
            return f"the gateway key has spent {dollars(self.spend)} (no budget set on it)"
        resets = f", reset {self.resets}" if self.resets else ""
        return (f"the gateway key has spent {dollars(self.spend)} of {dollars(self.max_budget)} "
                f"({dollars(self.left or 0.0)} left{resets})")


def dollars(value: float) -> str:
    return f"${value:.4f}"


def is_budget_refusal(body: Any, text: str = "") -> bool:
    """Whether an error answer is a gateway's "budget exceeded" (``body``: the error object or the whole body)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        if error.get("type") in BUDGET_TYPES:
            return True
        text = f"{text} {error.get('message', '')}"
    elif isinstance(body, str):
        text = f"{text} {body}"
    return any(words in str(text).lower() for words in BUDGET_WORDS)


def parse_key_info(data: Any) -> KeyBudget | None:
    """The budget in a ``/key/info`` answer, None for any other shape (a server that is no such gateway)."""
    info = data.get("info") if isinstance(data, dict) else None
    if not isinstance(info, dict):
        return None
    spend, budget = info.get("spend"), info.get("max_budget")
    if not _amount(spend) or not (budget is None or _amount(budget)):
        return None
    assert isinstance(spend, int | float)
    resets = info.get("budget_reset_at")
    return KeyBudget(float(spend), None if budget is None else float(budget),
                     resets if isinstance(resets, str) and 0 < len(resets) <= 40 and resets.isprintable() else None)


def _amount(value: Any) -> bool:
    """A sum of money a gateway may report: a number from 0 to 10^12 USD (a larger one is no budget, but a lie)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 <= value <= 10**12


def info_url(base_url: str) -> str:
    """Where ``/key/info`` is for an OpenAI-compatible base URL: at the gateway's root (``/v1`` left off)."""
    root = base_url.rstrip("/")
    return (root[:-3] if root.endswith("/v1") else root) + "/key/info"


def read_key_budget(base_url: str, key: str, timeout: float = INFO_SECONDS) -> KeyBudget | None:
    """The key's budget as the gateway at ``base_url`` tells it, None when it does not (no such endpoint, another
    shape, no answer). The key goes only to the URL it is for; nothing of the answer but the numbers is kept (a
    LiteLLM answer repeats the key)."""
    request = urllib.request.Request(info_url(base_url), headers={"Authorization": f"Bearer {key}",
                                                                   "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - the run's own http(s) URL
            data = json.loads(answer.read(1_000_000))
    except (OSError, ValueError, RecursionError):  # HTTPError, URLError and timeouts are OSErrors
        return None
    return parse_key_info(data)


_NO_GATEWAY: set[str] = set()
"""Base URLs that answered ``/key/info`` with no budget: not asked again in this process."""


@dataclass(frozen=True)
class RunBudget:
    """A run's gateway key budget: read once before the run (:meth:`read`) and once after it (:meth:`after`)."""

    url: str
    key: str
    before: KeyBudget

    @classmethod
    def read(cls, model: object) -> RunBudget | None:
        """The budget of the key ``model`` sends to its base URL, when that URL is a gateway that tells it (an
        OpenAI-compatible adapter with a key, see ``gateway()``); AgentConfigError when the key's budget is spent,
        so that the run is refused before any request."""
        access = getattr(getattr(model, "inner", model), "gateway", None)
        found = access() if callable(access) else None
        if found is None or found[0] in _NO_GATEWAY:
            return None
        url, key = found
        budget = read_key_budget(url, key)
        if budget is None:
            _NO_GATEWAY.add(url)
            return None
        if budget.left is not None and budget.left <= 0:
            raise AgentConfigError(f"GATEWAY_BUDGET: {budget.line()}: the gateway refuses this key's requests "
                                   "until its budget is raised or reset (ask whoever gave you the key)")
        return cls(url, key, budget)

    def cap(self, limits: Limits) -> Limits:
        """The run's limits with ``max_cost`` no more than what the key has left."""
        left = self.before.left
        if left is None or limits.max_cost is not None and limits.max_cost <= left:
            return limits
        return replace(limits, max_cost=left)

    async def after(self) -> str:
        """:meth:`after_line` off the event loop."""
        return await asyncio.to_thread(self.after_line)

    def after_line(self) -> str:
        """The line the record ends with: the key's spend after the run, and this run's part of it."""
        now = read_key_budget(self.url, self.key)
        if now is None:
            return f"{self.before.line()} before this run; the gateway did not say after it"
        return f"{now.line()}; this run: {dollars(max(0.0, now.spend - self.before.spend))}"
