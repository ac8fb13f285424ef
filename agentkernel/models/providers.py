"""Provider strings (``anthropic:claude-sonnet-4-5``, ``ollama:qwen3``, ...): which adapter and which base URL, decided
in this one table (:data:`PROVIDERS`); which key may go where is each provider's rule
(:class:`agentkernel.models.provider.Provider`). Nothing here imports an SDK until an adapter is made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..extras import needs
from .provider import ANTHROPIC, OPENAI, Api, Provider, anthropic_root, same_url

if TYPE_CHECKING:
    from .base import Model

PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    OPENAI,
    ANTHROPIC,
    Provider("gemini", "Gemini", "chat", "https://generativelanguage.googleapis.com/v1beta/openai/", "GEMINI_API_KEY",
             prices="google"),
    Provider("ollama", "Ollama", "chat", "http://localhost:11434/v1"),
    Provider("openrouter", "OpenRouter", "chat", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
             prices="openrouter"),
    Provider("openai-compatible", "OpenAI", "chat", None),
)}
"""Every provider a model string may name, by its prefix."""


def split_model(spec: str) -> tuple[Provider | None, str]:
    """``"anthropic:claude-x"`` -> (the Anthropic provider, ``"claude-x"``); a name with no known prefix (``gpt-4.1``,
    Ollama's ``qwen3:8b``) -> (None, the name as given)."""
    prefix, colon, rest = spec.partition(":")
    provider = PROVIDERS.get(prefix.strip().lower()) if colon else None
    return (provider, rest.strip()) if provider is not None else (None, spec)


def misspelt_provider(spec: str) -> str | None:
    """Why ``spec`` looks like a provider's name misspelt (``antropic:claude-x``), with the provider meant; else None.

    A slip is one letter dropped, added, changed or two swapped (two for the names of nine letters or more). Only
    for a name bound for OpenAI's own API (no base URL): there a colon is no Ollama ``qwen3:8b`` (``llama3:8b`` is
    two slips from ``ollama``), and the typo would otherwise surface as a missing OpenAI key.
    """
    prefix, colon, rest = spec.partition(":")
    typed = prefix.strip().lower()
    meant = [name for name in PROVIDERS if colon and slips(typed, name) <= (2 if len(name) >= 9 else 1)]
    if not meant:
        return None
    return (f"{spec!r}: {prefix.strip()!r} is not a provider; did you mean {meant[0]}:{rest.strip()}? "
            f"(providers: {', '.join(PROVIDERS)})")


def slips(a: str, b: str) -> int:
    """The number of one-letter slips (drop, add, change, swap two neighbours) between ``a`` and ``b``."""
    before, row = list(range(len(b) + 1)), list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        before, row, earlier = row, [i], before
        for j, y in enumerate(b, 1):
            row.append(min(before[j] + 1, row[j - 1] + 1, before[j - 1] + (x != y)))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                row[j] = min(row[j], earlier[j - 2] + 1)
    return row[-1]


@dataclass(frozen=True)
class Resolved:
    """A model string resolved: the provider, the adapter's API, the model's name for it and the base URL given."""

    provider: Provider
    api: Api
    model: str
    base_url: str | None
    """The URL given (``None``: the provider's default, see :meth:`Provider.default_url`)."""

    def key_problem(self, api_key_env: str | None) -> str | None:
        """Why a request would surely go without the key it needs (checked before a run starts), else None."""
        if api_key_env or not self.provider.key_env or os.environ.get(self.provider.key_env):
            return None
        if not same_url(self.base_url or self.provider.default_url() or "", self.provider.url or ""):
            return None  # another server: it gets no key, and may need none
        return (f"{self.provider.key_env} is not set: set the key, give --base-url for a local server, "
                "or use a scripted model")

    def model_object(self, **options: Any) -> Model:
        """The adapter for this model (its SDK imported now); ``options`` go to its constructor. A missing SDK is an
        :class:`~agentkernel.errors.AgentConfigError` naming the ``pip install`` command."""
        if self.api == "anthropic":
            with needs("anthropic"):
                from .anthropic_messages import AnthropicMessagesModel

            return AnthropicMessagesModel(self.model, base_url=self.base_url, **options)
        if self.api == "chat":
            with needs("openai"):
                from .openai_chat import OpenAIChatModel

            return OpenAIChatModel(self.model, base_url=self.base_url, provider=self.provider, **options)
        with needs("openai"):
            from .openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(self.model, base_url=self.base_url, provider=self.provider, **options)


def resolve(spec: str, *, api: str = "responses", base_url: str | None = None) -> Resolved:
    """Resolve ``-m spec`` with ``--api`` and ``--base-url``: a plain name is today's OpenAI (Responses, or Chat
    with ``api="chat"``), as is ``openai:``; the other providers have one adapter each. Raises ``ValueError`` (one
    line) when ``openai-compatible:`` has no base URL, the model name is empty, or a name for OpenAI's own API
    starts with a misspelt provider (``antropic:``)."""
    provider, model = split_model(spec)
    if provider is None and base_url is None and (suggestion := misspelt_provider(spec)):
        raise ValueError(suggestion)
    named = provider is not None
    provider = provider or OPENAI
    if named and not model:
        raise ValueError(f"{spec!r} names the provider {provider.name} but no model (write {provider.name}:MODEL)")
    if provider.url is None and not base_url:
        raise ValueError(f"{provider.name}: needs --base-url (base_url=...): the server's OpenAI-compatible /v1 URL")
    chosen: Api = "chat" if provider is OPENAI and api == "chat" else provider.api
    if chosen == "anthropic" and base_url:
        base_url = anthropic_root(base_url)
    return Resolved(provider, chosen, model, base_url or None)
