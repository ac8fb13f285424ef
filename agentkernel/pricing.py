"""What a model's tokens cost: a :class:`Price` given by the user, or the ``genai-prices`` data (:class:`Catalog`).

``genai-prices`` (pydantic's maintained price data: input, output, cache-read and cache-write rates, providers
matched by base URL) is imported only when a model is first looked up, never when the package loads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import AgentConfigError
from .extras import missing
from .models.base import UsageEvent

MILLION = 1_000_000

PRICE_FORMAT = "IN,OUT[,CACHED_IN] in USD per million tokens (e.g. 0.4,1.6,0.1), or 0 for a free local server"


class Pricer(Protocol):
    """Prices one response's usage in USD."""

    def cost(self, usage: UsageEvent) -> float: ...


@dataclass(frozen=True)
class Price:
    """Rates in USD per million tokens; cache reads cost ``cached_input`` (default: ``input``), cache writes
    ``cache_write`` (default: ``input``)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # also refuses nan
                raise ValueError(f"a price is 0 or more USD per million tokens, not {value!r} ({name})")

    def cost(self, usage: UsageEvent) -> float:
        read, written = usage.cache_read_tokens, usage.cache_write_tokens
        fresh = max(usage.input_tokens - read - written, 0)
        cached = self.input if self.cached_input is None else self.cached_input
        writing = self.input if self.cache_write is None else self.cache_write
        return (fresh * self.input + read * cached + written * writing + usage.output_tokens * self.output) / MILLION


FREE = Price(0.0, 0.0)


def parse_price(text: str) -> Price:
    """``--price``: ``"0"`` (free), or ``"IN,OUT"`` / ``"IN,OUT,CACHED_IN"`` in USD per million tokens."""
    words = [word.strip() for word in text.split(",")]
    try:
        rates = [float(word) for word in words]
        if len(rates) == 1 and rates[0] == 0:
            return FREE
        if len(rates) not in (2, 3):
            raise ValueError
        return Price(*rates)
    except ValueError:
        raise AgentConfigError(f"--price {text!r} is not a price: give {PRICE_FORMAT}") from None


@dataclass(frozen=True)
class Catalog:
    """A model's prices from ``genai-prices``: by provider id when one is known, else by the API's base URL."""

    model: str
    provider_id: str | None = None
    provider_api_url: str | None = None

    def cost(self, usage: UsageEvent) -> float:
        from genai_prices import Usage, calc_price

        tokens = Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                       cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens)
        where: dict[str, Any] = ({"provider_id": self.provider_id} if self.provider_id
                                 else {"provider_api_url": self.provider_api_url})
        return float(calc_price(tokens, self.model, **where).total_price)


def catalog_price(model: object) -> Catalog | None:
    """The ``genai-prices`` entry for ``model``, or ``None`` when its data does not know it.

    The model says where it runs with ``price_provider`` (a ``genai-prices`` provider id, e.g. ``openai``) or
    ``base_url``; its name is ``model`` (the API's name for it), else ``name``. A model that says neither (a
    scripted model, your own object) is not looked up: a local server's model named like a hosted one would
    otherwise get the hosted one's price.
    """
    provider = getattr(model, "price_provider", None)
    url = getattr(model, "base_url", None)
    name = getattr(model, "model", None) or getattr(model, "name", None)
    if not isinstance(name, str) or not (provider or isinstance(url, str)):
        return None
    catalog = Catalog(name, provider_id=provider, provider_api_url=None if provider else url)
    try:
        catalog.cost(UsageEvent())
    except LookupError:  # an unknown provider or model
        return None
    except ImportError:  # genai-prices is a dependency, but a trimmed environment may lack it: cost unknown
        return None
    return catalog


def price_for(model: object, price: Pricer | None = None) -> Pricer | None:
    """The price of ``model``'s tokens: ``price`` when given, else the model's own ``price`` attribute, else its
    ``genai-prices`` entry (a recording model's: the model it records); ``None``: unknown."""
    model = getattr(model, "inner", model)
    return price or getattr(model, "price", None) or catalog_price(model)


def no_price_error(model: object) -> AgentConfigError:
    """The error of a cost budget without a price: why none is known (genai-prices missing, not listing the model
    where it runs, or a model object that says neither), and how to give one."""
    inner = getattr(model, "inner", model)
    name = getattr(inner, "model", None) or getattr(inner, "name", type(inner).__name__)
    if not (getattr(inner, "price_provider", None) or isinstance(getattr(inner, "base_url", None), str)):
        why = "it is a model object that names no provider or URL to look its price up by"
    elif importlib.util.find_spec("genai_prices") is None:
        why = missing("genai_prices")
    else:
        why = "genai-prices does not list it where it runs"
    return AgentConfigError(f"--max-cost needs a price, and none is known for the model {name!r} ({why}): give "
                            f"--price {PRICE_FORMAT}, or price=Price(...) to AgentLoop")
