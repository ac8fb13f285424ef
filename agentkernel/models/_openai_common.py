"""What both OpenAI adapters share: the ``openai.AsyncOpenAI`` client, request options, and the server's own
context window; the rest (keys, errors, the history converted once per item) is :mod:`agentkernel.models._api`'s."""

from __future__ import annotations

import os

import openai

from ..secrets import without_credentials
from ._api import ApiModel, InputCache
from .base import ModelError
from .provider import LOCAL_PLACEHOLDER_KEY, OPENAI, Provider, same_url

__all__ = ["DEFAULT_TIMEOUT", "OPENAI_API_URL", "InputCache", "OpenAIModelBase"]

DEFAULT_TIMEOUT = openai.Timeout(600.0, connect=10.0)
"""Long enough for a slow model's whole answer, short enough to notice an unreachable server."""

OPENAI_API_URL = OPENAI.url or ""


class OpenAIModelBase(ApiModel):
    """Shared by both adapters: the ``openai.AsyncOpenAI`` client made on first use, options, and error mapping.

    Which key is sent: ``api_key`` if given; else the environment variable named by ``api_key_env``; else
    ``OPENAI_API_KEY``, but only to the OpenAI API or to the ``OPENAI_BASE_URL`` the environment itself names,
    so a ``base_url`` written into a shared notebook never receives your key. Other servers get a placeholder.
    ``provider`` (see :mod:`agentkernel.models.provider`) is another OpenAI-compatible provider whose own key
    variable and URL take the place of those (``GEMINI_API_KEY`` to Google's endpoint, say). A ``client`` passed
    in is used as it is.

    ``max_output_tokens`` caps each response (Responses ``max_output_tokens``; Chat ``max_completion_tokens``
    for the OpenAI API, ``max_tokens`` for other servers); ``temperature`` is sent when set. ``price_provider``
    prices the model as that provider's (a genai-prices id: ``openai`` for a proxy of the OpenAI API).
    """

    sdk = openai
    sdk_error = openai.OpenAIError

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        max_retries: int = 2,
        timeout: float | openai.Timeout | None = DEFAULT_TIMEOUT,
        provider: Provider = OPENAI,
        price_provider: str | None = None,
    ):
        super().__init__(model, provider=provider, client=client, base_url=base_url, api_key=api_key,
                         api_key_env=api_key_env, max_output_tokens=max_output_tokens, temperature=temperature,
                         max_retries=max_retries, timeout=timeout, price_provider=price_provider)

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client (made on first access; again on another event loop)."""
        client: openai.AsyncOpenAI = self._shared_client()
        return client

    def _new_client(self, api_key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(api_key=api_key, base_url=self._configured_url() or None,
                                  max_retries=self._max_retries, timeout=self._timeout)

    def _configured_url(self) -> str | None:
        """The base URL given to this model, else the provider's default (``OPENAI_BASE_URL`` or the provider's
        own; None: the OpenAI SDK's default)."""
        return self._base_url or (None if self.provider is OPENAI and not os.environ.get("OPENAI_BASE_URL")
                                  else self.provider.default_url())

    @property
    def base_url(self) -> str:
        """The API's base URL, without any credentials it might embed (safe to show)."""
        url = self._configured_url() or OPENAI_API_URL
        if self._client is not None:
            url = str(self._client.base_url)
        return without_credentials(url).rstrip("/")

    @property
    def api_url(self) -> str:
        return self.base_url

    def gateway(self) -> tuple[str, str] | None:
        """Where a gateway's budget for this model's key may be asked: the base URL and the key sent there; None for
        the OpenAI API itself and for a server that gets no key."""
        if self.is_openai_api:
            return None
        url = str(self._client.base_url) if self._client is not None else self._configured_url()
        try:
            key = self._client.api_key if self._client is not None else self._key()
        except ModelError:
            return None
        if not url or not key or key == LOCAL_PLACEHOLDER_KEY:
            return None
        return url.rstrip("/"), key

    @property
    def is_openai_api(self) -> bool:
        """Whether requests go to the OpenAI API itself (not an OpenAI-compatible server)."""
        return same_url(self.base_url, OPENAI_API_URL)

    @property
    def accepts_images(self) -> bool:
        """Whether tools should give this model images by default: only a hosted provider's own API (OpenAI,
        Gemini, OpenRouter) is known to take them (a text-only local server rejects a request that holds one)."""
        return bool(self.provider.key_env) and same_url(self.base_url, self.provider.url or "")
