"""What every SDK adapter shares, whichever SDK: the client made on first use (and again on another event loop), the
key it may send, the history converted once per item, and SDK and stream faults turned into key-free ModelErrors.

The ``openai`` and ``anthropic`` SDKs are made by the same generator and have the same error classes
(``AuthenticationError``, ``RateLimitError``, ``APIConnectionError``, ...), so one description of them serves both;
an adapter names its SDK module in :attr:`ApiModel.sdk`. Nothing here imports an SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ..gateway import is_budget_refusal
from ..record.history import Item
from ..secrets import MIN_SECRET_CHARS, redact_text
from ..text import short
from .base import ContextOverflowError, GatewayBudgetError, ModelError, ModelRequest
from .overflow import overflow_numbers
from .provider import LOCAL_PLACEHOLDER_KEY, Provider, same_url

RETRIED_STATUSES = (408, 409, 429)
"""With 5xx, the statuses both SDKs retry (unless the server says ``x-should-retry: false``)."""

S = TypeVar("S")


class ApiModel:
    """The base of the SDK adapters: the client, the key, and error mapping.

    The client is made lazily so that building a model with no key configured never fails; the missing key becomes
    a clear ``ModelError`` when the model is first asked for a response. A ``client`` passed in is used as it is
    (its own key, base URL, retries and timeout). Which key goes where is the ``provider``'s rule (see
    :mod:`agentkernel.models.provider`).
    """

    sdk: Any
    """The SDK module (``openai`` or ``anthropic``), for its error classes."""
    sdk_error: type[Exception]
    """The base of the SDK's errors (``openai.OpenAIError``, ``anthropic.AnthropicError``)."""

    def __init__(self, model: str, *, provider: Provider, client: Any = None, base_url: str | None = None,
                 api_key: str | None = None, api_key_env: str | None = None, max_output_tokens: int | None = None,
                 temperature: float | None = None, max_retries: int = 2, timeout: Any = None,
                 price_provider: str | None = None):
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be a positive number of tokens, not {max_output_tokens}")
        self.model = model
        self.name = model
        self.provider = provider
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self._client = client
        self._own_client = client is None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._base_url = base_url
        self._api_key = api_key
        self._api_key_env = api_key_env
        self._max_retries = max_retries
        self._timeout = timeout
        self._discovered: tuple[int | None] | None = None
        self._price_provider = price_provider

    @property
    def api_url(self) -> str:
        """The URL the API's paths (``/models``, ``/chat/completions``, ``/messages``) are under."""
        raise NotImplementedError

    def _new_client(self, api_key: str) -> Any:
        """The SDK's async client for this model, sending ``api_key``."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        """The API's base URL, without any credentials it might embed (safe to show)."""
        raise NotImplementedError

    def _shared_client(self) -> Any:
        """The SDK client (made on first access from the arguments and the environment).

        A client this model made is made again on another event loop (its pooled connections belong to the loop they
        were opened on), so one model object can serve several ``asyncio.run`` calls.
        """
        loop = _running_loop()
        if self._own_client and self._client is not None and loop is not self._client_loop:
            self._client = None  # its connections belong to an earlier event loop
        if self._client is None:
            key = self._key()
            try:
                self._client = self._new_client(key)
            except self.sdk_error as error:
                raise ModelError(self._redact(f"could not set up the {self.provider.title} client: {error}")) from None
            self._client_loop = loop
        return self._client

    def _key(self) -> str:
        """The key to send (see the provider's rules); raises ModelError when the provider's API would get none."""
        return self.provider.key(self._base_url, api_key=self._api_key, api_key_env=self._api_key_env)

    @property
    def price_provider(self) -> str | None:
        """Whose prices apply (a ``genai-prices`` provider id): ``price_provider`` if given (``openai`` for a proxy of
        the OpenAI API), else the provider's when requests go to its own URL; ``None`` leaves it to the base URL
        (see :mod:`agentkernel.pricing`)."""
        if self._price_provider:
            return self._price_provider
        own = bool(self.provider.url) and same_url(self.base_url, self.provider.url or "")
        return self.provider.prices if own else None

    def output_cap(self, request: ModelRequest, default: int | None = None) -> int | None:
        """The response's output cap: the lower of the model's own (else ``default``) and the request's (the cost
        budget's)."""
        caps = [cap for cap in (self.max_output_tokens or default, request.max_output_tokens) if cap is not None]
        return min(caps) if caps else None

    def sampling_options(self, max_tokens_field: str, request: ModelRequest) -> dict[str, Any]:
        """``temperature``, the output cap (sent as ``max_tokens_field``, see :meth:`output_cap`) and, for OpenAI,
        the run's ``prompt_cache_key``; only those that are set."""
        options: dict[str, Any] = {}
        if (cap := self.output_cap(request)) is not None:
            options[max_tokens_field] = cap
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if request.cache_key and self.price_provider == "openai":  # other servers may refuse a field they lack
            options["prompt_cache_key"] = request.cache_key
        return options

    @contextlib.asynccontextmanager
    async def _api_stream(self, opening: Awaitable[S]) -> AsyncIterator[S]:
        """Open an SDK stream, map SDK and stream faults to :class:`ModelError`, and always close the response.

        Closing in ``finally`` matters: when the loop aborts (``aclose()`` on the adapter's generator, or task
        cancellation), the connection is dropped at once, so the server sees the disconnect and stops generating.
        """
        try:
            stream = await opening
        except self.sdk_error as error:
            raise self._model_error(error) from None
        except Exception as error:  # the SDK could not make the request (a transport error it let through, ...)
            raise ModelError(self._redact(f"could not send the request to the model API at {self.base_url} "
                                          f"({_named(error)})")) from None
        try:
            yield stream
        except ModelError:  # the adapter's own
            raise
        except self.sdk_error as error:
            raise self._model_error(error) from None
        except json.JSONDecodeError as error:  # the SDK parses each SSE data line as JSON
            raise ModelError(self._redact(f"the model API at {self.base_url} sent stream data that is not JSON: "
                                          f"{short(error.doc, 80)!r}")) from None
        except _transport_errors() as error:  # the anthropic SDK lets a connection cut mid-stream through as it is
            raise ModelError(self._redact(f"lost the connection to the model API at {self.base_url} in the middle "
                                          f"of its answer ({_named(error)})")) from None
        except (AttributeError, KeyError, TypeError, ValueError) as error:  # JSON, but not the shape of an event
            raise ModelError(self._redact(f"the model API at {self.base_url} sent a stream event this adapter "
                                          f"cannot read ({_named(error)})")) from None
        except Exception as error:  # anything else: the run still ends with a message, never an exception
            raise ModelError(self._redact(f"the model API at {self.base_url} failed in the middle of its answer "
                                          f"({_named(error)})")) from None
        finally:
            await stream.close()  # type: ignore[attr-defined]

    def secrets(self) -> list[str]:
        """The keys this model may send (to keep them out of messages and recordings)."""
        client_key = getattr(self._client, "api_key", None) if self._client is not None else None
        named = os.environ.get(self._api_key_env) if self._api_key_env else None
        own = os.environ.get(self.provider.key_env) if self.provider.key_env else None
        keys = (self._api_key, named, own, client_key)
        return [k for k in dict.fromkeys(keys) if k and len(k) >= MIN_SECRET_CHARS and k != LOCAL_PLACEHOLDER_KEY]

    def _redact(self, text: str) -> str:
        return redact_text(text, self.secrets())

    def _model_error(self, error: Exception) -> ModelError:
        """Describe an SDK error (raised after the SDK's own retries) for the user, never including a key; a
        request refused as too long for the model's window is a :class:`ContextOverflowError`."""
        message = self._describe(error)
        if isinstance(error, self.sdk.APIError) and not isinstance(error, self.sdk.APIConnectionError):
            return self.api_error(message, error.body, error.message)
        return ModelError(self._redact(message))

    def api_error(self, message: str, body: Any, text: str = "") -> ModelError:
        """The key-free error for an API's refusal: a :class:`ContextOverflowError`, with the numbers the server
        gave, when ``body`` (or the server's ``text``) says the request was too long for the window."""
        overflow, window, prompt_tokens = overflow_numbers(body, text)
        if not overflow and is_budget_refusal(body, text):
            return GatewayBudgetError(self._redact(f"the gateway refused the request: the key's budget is spent "
                                                   f"({_server_message_of(body, text)})"))
        if not overflow:
            return ModelError(self._redact(message))
        return ContextOverflowError(self._redact(message), window=window, prompt_tokens=prompt_tokens)

    def _describe(self, error: Exception) -> str:
        sdk = self.sdk
        retries = self._client.max_retries if self._client is not None else self._max_retries
        after = f" after {retries} retries" if retries else ""
        if isinstance(error, sdk.AuthenticationError):
            if self._client is not None and self._client.api_key == LOCAL_PLACEHOLDER_KEY:
                return (f"the model API at {self.base_url} wants a key (401 Unauthorized), and it got none: "
                        f"{self.provider.describe_key()}; name the environment variable that holds this server's "
                        "key with --api-key-env (or api_key_env=...)")
            return (f"the model API at {self.base_url} refused the key (401 Unauthorized): "
                    f"check {self.provider.key_env or 'the key'} (or the api_key / --api-key-env given)")
        if isinstance(error, sdk.PermissionDeniedError):
            return f"the model API refused access (403 Forbidden): {_server_message(error)}"
        if isinstance(error, sdk.NotFoundError):
            return (f"the model API at {self.base_url} answered 404 Not Found (wrong model name or base URL?): "
                    f"{_server_message(error)}")
        if isinstance(error, sdk.APIStatusError) and error.status_code < 400:  # an error event in a 200 stream
            return f"the model API reported an error in the middle of its answer: {_server_message(error)}"
        if isinstance(error, sdk.APIStatusError):
            after = after if _was_retried(error.response) else ""
            if isinstance(error, sdk.RateLimitError):
                return f"the model API is rate limited or out of quota (429){after}: {_server_message(error)}"
            if isinstance(error, sdk.BadRequestError | sdk.UnprocessableEntityError):
                return f"the model API rejected the request (HTTP {error.status_code}): {_server_message(error)}"
            return f"the model API failed with HTTP {error.status_code}{after}: {_server_message(error)}"
        if isinstance(error, sdk.APITimeoutError):
            return f"the model API at {self.base_url} timed out{after}"
        if isinstance(error, sdk.APIConnectionError):
            cause = error.__cause__
            reason = f" ({type(cause).__name__}: {cause})" if cause else ""
            return f"lost or could not open the connection to the model API at {self.base_url}{after}{reason}"
        if isinstance(error, sdk.APIError):
            return f"the model API reported an error: {error.message}"
        return f"the {self.provider.title} client failed: {error}"


    async def discover_context_window(self) -> int | None:
        """The context window the server says it has (llama.cpp's ``/props`` ``n_ctx``), asked once; ``None`` for
        a hosted provider's own API and for servers that do not say (the window is then learned from an overflow
        error)."""
        if self._discovered is None:
            self._discovered = (await self._ask_window(),)
        return self._discovered[0]

    async def _ask_window(self) -> int | None:
        hosted = bool(self.provider.key_env) and same_url(self.base_url, self.provider.url or "")
        if hosted or not self.base_url.startswith(("http://", "https://")):
            return None
        root = self.api_url.removesuffix("/v1")
        props = await asyncio.to_thread(_get_json, f"{root}/props")  # llama.cpp
        settings = props.get("default_generation_settings")
        if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
            return settings["n_ctx"]
        models = await asyncio.to_thread(_get_json, f"{self.api_url}/models")  # vLLM, llama.cpp's meta
        data = models.get("data")
        cards = [card for card in data if isinstance(card, dict)] if isinstance(data, list) else []
        ours = [card for card in cards if card.get("id") == self.model] or cards[:1] * (len(cards) == 1)
        for card in ours:
            meta = card["meta"] if isinstance(card.get("meta"), dict) else {}
            for value in (card.get("max_model_len"), meta.get("n_ctx")):
                if _positive(value):
                    return value
        return None


class InputCache:
    """The history converted to an API's input shape, each item once.

    Within a run the history only grows by appends (and an item is never edited once appended), so each request
    converts just the items added since the last one; the adapter's own work per request does not grow with the
    history. ``fold(converted, item)``
    appends an item's converted form (or merges it into the last one, as Chat does with tool calls). Another
    history list, or one whose converted part changed, is converted afresh.
    """

    def __init__(self, fold: Callable[[list[dict[str, Any]], Item], None]):
        self.fold = fold
        self.history: list[Item] | None = None
        self.converted: list[dict[str, Any]] = []
        self.count = 0
        self.last: Item | None = None

    def convert(self, history: list[Item]) -> list[dict[str, Any]]:
        """The converted history (a new list each time; its dicts are shared with earlier requests)."""
        count = self.count
        if history is not self.history or len(history) < count or (count and history[count - 1] is not self.last):
            self.history, self.converted, count = history, [], 0
        for item in history[count:]:
            self.fold(self.converted, item)
        self.count = len(history)
        self.last = history[-1] if history else None
        return list(self.converted)


def _named(error: BaseException) -> str:
    """``RemoteProtocolError: peer closed connection ...``, cut short."""
    return f"{type(error).__name__}: {short(str(error), 120)}"


def _transport_errors() -> tuple[type[Exception], ...]:
    """The transport errors of the HTTP clients the SDKs use (``httpx2``, ``httpx``), of those already imported:
    nothing here imports them."""
    modules = (sys.modules.get(name) for name in ("httpx2", "httpx"))
    return tuple(module.TransportError for module in modules if module is not None)


def _was_retried(response: Any) -> bool:
    """Whether the SDK retries an answer like this one (its own rule: the header first, then the status)."""
    should = response.headers.get("x-should-retry")
    if should in ("true", "false"):
        return should == "true"
    return response.status_code in RETRIED_STATUSES or response.status_code >= 500


def _get_json(url: str, timeout: float = 2.0) -> dict[str, Any]:
    """A GET answered with a JSON object, else ``{}`` (a server without that endpoint, or none at all). Sends no key:
    these endpoints need none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            value = json.load(answer)
    except (OSError, ValueError, RecursionError):  # URLError and HTTPError are OSErrors; RecursionError: too deep
        return {}
    return value if isinstance(value, dict) else {}


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _server_message_of(body: Any, text: str) -> str:
    """The server's words in an error ``body`` (the error object or the whole body), else ``text``."""
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message if isinstance(message, str) else text or "no details")[:300]


def _server_message(error: Any) -> str:
    """The server's own words in an error body: OpenAI's ``{"message"}`` (the SDK's ``body`` is the ``error``
    object) or Anthropic's ``{"type": "error", "error": {"message"}}``."""
    body: Any = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    if body:
        return str(body)[:300]
    return str(error.response.reason_phrase or "no details")
