"""What both OpenAI adapters share: making the client, and turning SDK errors into key-free ModelErrors."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import openai

from ..redact import known_secrets, redact_text, without_credentials
from .base import ModelError

DEFAULT_TIMEOUT = openai.Timeout(600.0, connect=10.0)
"""Long enough for a slow model's whole answer, short enough to notice an unreachable server."""

LOCAL_PLACEHOLDER_KEY = "not-needed"
"""Sent to a custom base URL when no key is configured: local servers (vLLM, Ollama, llama.cpp) ignore it."""


S = TypeVar("S", bound="openai.AsyncStream[Any]")


class OpenAIModelBase:
    """Shared by both adapters: the ``openai.AsyncOpenAI`` client made on first use, and error mapping.

    The client is made lazily so that building a model with no key configured never fails; the missing key
    becomes a clear ``ModelError`` when the model is first asked for a response. A ``client`` passed in is
    used as it is (its own key, base URL, retries and timeout).
    """

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float | openai.Timeout | None = DEFAULT_TIMEOUT,
    ):
        self.model = model
        self.name = model
        self._client = client
        self._own_client = client is None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._base_url = base_url
        self._api_key = api_key
        self._max_retries = max_retries
        self._timeout = timeout

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client (made on first access from the arguments, ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``).

        A client this model made is made again on another event loop (its pooled connections belong to the
        loop they were opened on), so one model object can serve several ``asyncio.run`` calls.
        """
        loop = _running_loop()
        if self._own_client and self._client is not None and loop is not self._client_loop:
            self._client = None  # its connections belong to an earlier event loop
        if self._client is None:
            base_url = self._base_url or os.environ.get("OPENAI_BASE_URL") or None
            api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None and base_url is not None:
                api_key = LOCAL_PLACEHOLDER_KEY
            if api_key is None:
                raise ModelError(
                    "no API key: set OPENAI_API_KEY (or pass api_key=...), or give a base URL for a local "
                    "OpenAI-compatible server that needs no key"
                )
            try:
                self._client = openai.AsyncOpenAI(
                    api_key=api_key, base_url=base_url, max_retries=self._max_retries, timeout=self._timeout
                )
            except openai.OpenAIError as error:
                raise ModelError(self._redact(f"could not set up the OpenAI client: {error}")) from None
            self._client_loop = loop
        return self._client

    @property
    def base_url(self) -> str:
        """The API's base URL, without any credentials it might embed (safe to show)."""
        url = self._base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if self._client is not None:
            url = str(self._client.base_url)
        return without_credentials(url)

    @contextlib.asynccontextmanager
    async def _api_stream(self, opening: Awaitable[S]) -> AsyncIterator[S]:
        """Open an SDK stream, map SDK errors to :class:`ModelError`, and always close the HTTP response.

        Closing in ``finally`` matters: when the loop aborts (``aclose()`` on the adapter's generator, or task
        cancellation), the connection is dropped at once, so the server sees the disconnect and stops generating.
        """
        try:
            stream = await opening
        except openai.OpenAIError as error:
            raise self._model_error(error) from None
        try:
            yield stream
        except openai.OpenAIError as error:
            raise self._model_error(error) from None
        finally:
            await stream.close()

    def secrets(self) -> list[str]:
        """The keys this model may send (to keep them out of messages and recordings)."""
        client_key = self._client.api_key if self._client is not None else None
        return [k for k in known_secrets(self._api_key, client_key) if k != LOCAL_PLACEHOLDER_KEY]

    def _redact(self, text: str) -> str:
        return redact_text(text, self.secrets())

    def _model_error(self, error: openai.OpenAIError) -> ModelError:
        """Describe an SDK error (raised after the SDK's own retries) for the user, never including a key."""
        return ModelError(self._redact(self._describe(error)))

    def _describe(self, error: openai.OpenAIError) -> str:
        retries = self._client.max_retries if self._client is not None else self._max_retries
        after = f" after {retries} retries" if retries else ""
        if isinstance(error, openai.AuthenticationError):
            return (f"the model API at {self.base_url} refused the key (401 Unauthorized): "
                    "check OPENAI_API_KEY (or the api_key given)")
        if isinstance(error, openai.PermissionDeniedError):
            return f"the model API refused access (403 Forbidden): {_server_message(error)}"
        if isinstance(error, openai.NotFoundError):
            return (f"the model API at {self.base_url} answered 404 Not Found (wrong model name or base URL?): "
                    f"{_server_message(error)}")
        if isinstance(error, openai.RateLimitError):
            return f"the model API is rate limited or out of quota (429){after}: {_server_message(error)}"
        if isinstance(error, openai.APIStatusError):
            return f"the model API failed with HTTP {error.status_code}{after}: {_server_message(error)}"
        if isinstance(error, openai.APITimeoutError):
            return f"the model API at {self.base_url} timed out{after}"
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__
            reason = f" ({type(cause).__name__}: {cause})" if cause else ""
            return f"lost or could not open the connection to the model API at {self.base_url}{after}{reason}"
        if isinstance(error, openai.APIError):
            return f"the model API reported an error: {error.message}"
        return f"the OpenAI client failed: {error}"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _server_message(error: openai.APIStatusError) -> str:
    body: Any = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    if body:
        return str(body)[:300]
    return error.response.reason_phrase or "no details"
