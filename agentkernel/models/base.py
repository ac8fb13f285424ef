"""The one model interface: a request in, an async stream of events out."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..record.history import Item


@dataclass
class ModelRequest:
    """What the loop asks a model: the system prompt, the history so far, and the tools' schemas."""

    system: str
    history: list[Item]
    tools: list[dict[str, Any]] = field(default_factory=list)
    purpose: str = "turn"
    """``turn`` (the next step of the run) or ``summary`` (compaction asks for a note on the turns given; the
    history then ends with the instruction; a scripted model answers it without using up a scripted turn)."""
    max_output_tokens: int | None = None
    """A cap on this response's tokens, lower than the model's own ``max_output_tokens`` when the run's cost budget
    has less left (``None``: the model's own cap alone)."""
    cache_key: str | None = None
    """Names the run, for a server that routes requests with one key to one prompt cache (OpenAI's
    ``prompt_cache_key``); a model may ignore it."""


@dataclass
class TextDelta:
    """A piece of the assistant's text, as it streams in."""

    text: str


def text_delta(value: object) -> TextDelta:
    """A streamed piece of text as the SDK parsed it; a ``TypeError`` (a stream event the adapter cannot read) when it
    is not text, raised inside the adapter so the stream's fault handling names it."""
    if not isinstance(value, str):
        raise TypeError(f"a text delta is a {type(value).__name__}, not text")
    return TextDelta(value)


@dataclass
class FunctionCallEvent:
    """A complete function call requested by the model.

    Made inside an adapter from what the server sent: a field that is not text raises ``TypeError`` there (a
    stream event the adapter cannot read, as with :func:`text_delta`); ``None`` is taken as empty.
    """

    call_id: str
    name: str
    arguments: str

    def __post_init__(self) -> None:
        if not (type(self.call_id) is str and type(self.name) is str and type(self.arguments) is str):
            _text_fields(self, "call_id", "name", "arguments")


@dataclass
class FunctionCallProgress:
    """A tool call the model is still writing: its name as soon as it is known, and the arguments' size so far.

    Adapters send one whenever a call's arguments grow, so a front end can show the call before it is complete.
    ``key`` stays the same while one call streams (its call_id, or the stream's index for it).
    """

    key: str
    name: str
    arguments_chars: int

    def __post_init__(self) -> None:
        if not (type(self.key) is str and type(self.name) is str):
            _text_fields(self, "key", "name")


def _text_fields(event: object, *names: str) -> None:
    """Check that each field is text (``None`` becomes ``""``); ``TypeError`` names the first that is not."""
    for name in names:
        value = getattr(event, name)
        if value is None:
            setattr(event, name, "")
        elif not isinstance(value, str):
            raise TypeError(f"a function call's {name} is a {type(value).__name__}, not text")


@dataclass
class UsageEvent:
    """Token usage of one response, as the API reported it.

    ``input_tokens`` counts every input token of the request, those read from or written to the prompt cache
    included (Anthropic reports them apart: its adapter adds them in); ``cache_read_tokens`` (OpenAI's
    ``cached_tokens``, Anthropic's ``cache_read_input_tokens``) and ``cache_write_tokens`` (Anthropic's
    ``cache_creation_input_tokens``) say how many of them; ``reasoning_tokens`` how many of ``output_tokens`` the
    model spent reasoning, where reported. An adapter passes the server's numbers on as they came (a server may send
    ``"12abc"`` or ``-995``) and sends no event when the server sent no usage; the loop checks them (:meth:`readable`
    and the request's size). ``estimated``: the loop estimated the response's usage from the characters sent and
    streamed, because the server sent none that could be right, or none before the response was cut short.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def readable(self) -> bool:
        """Whether every count is a token count (:func:`is_count`), the cached tokens within the input and the
        reasoning tokens within the output."""
        given, read, written = self.input_tokens, self.cache_read_tokens, self.cache_write_tokens
        out, reasoning = self.output_tokens, self.reasoning_tokens
        return (type(given) is int and type(read) is int and type(written) is int and type(out) is int
                and type(reasoning) is int and read >= 0 and written >= 0 and given >= read + written
                and out >= reasoning >= 0)  # ``type(...) is int``: a bool is no count


def is_count(value: object) -> bool:
    """Whether ``value`` is a token count as a server should send one: an ``int`` (not a ``bool``) of 0 or more."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def reported(usage: object, name: str, absent: Any = None) -> Any:
    """The field ``name`` of a server's usage object as it came (the loop checks it), ``absent`` when the server left
    it out or sent ``null``: an adapter passes on whatever a server sends, never failing on it."""
    value = getattr(usage, name, None)
    return absent if value is None else value


@dataclass
class Truncation:
    """The server cut the response short; ``reason`` is its own word (``length``, ``content_filter``,
    ``max_output_tokens``, ...).

    Sent after the text and calls that did arrive. The loop keeps the text, runs none of the response's tool calls
    (even one whose arguments parse) and ends the run as ``truncated``.
    """

    reason: str


@dataclass
class Thinking:
    """The model's reasoning as its provider wants it sent back with the turn (Anthropic's signed ``thinking`` and
    ``redacted_thinking`` blocks, as the API gave them).

    The loop keeps the blocks on the turn's first history item, under :data:`THINKING_KEY`; the adapter that made
    them sends them back in front of that turn, the others leave the key out of their requests.
    """

    blocks: list[dict[str, Any]]


THINKING_KEY = "thinking"
"""The history item key that holds a turn's :class:`Thinking` blocks."""

ModelEvent = TextDelta | FunctionCallProgress | FunctionCallEvent | UsageEvent | Truncation | Thinking


class ModelError(Exception):
    """The model could not answer (the API failed after retries, refused auth, or the stream broke).

    The loop turns it into the ``fatal_error`` status; the message is shown to the user, so it must never
    contain an API key.
    """


class ContextOverflowError(ModelError):
    """The server refused the request as longer than the model's context window.

    ``window`` and ``prompt_tokens`` are the numbers the server gave (``None`` when it did not say); the loop
    compacts its view of the history and retries instead of ending the run.
    """

    def __init__(self, message: str, *, window: int | None = None, prompt_tokens: int | None = None):
        super().__init__(message)
        self.window = window
        self.prompt_tokens = prompt_tokens


class GatewayBudgetError(ModelError):
    """An LLM gateway (the LiteLLM proxy, ...) refused the request because the key's budget is spent; the loop ends
    the run as ``gateway_budget``, its partial result kept (:mod:`agentkernel.gateway`)."""


@runtime_checkable
class Model(Protocol):
    """Anything with a ``name`` and a ``stream(request)`` async generator of :data:`ModelEvent`.

    The loop closes the generator (``aclose``) when it stops early, so a model holding a connection can drop it.
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]: ...


def accepts_images(model: object) -> bool:
    """Whether to give ``model`` images by default (``%%agent --images`` decides when given).

    A model says so with an ``accepts_images`` attribute: the OpenAI adapters only for the OpenAI API itself, a
    replay when its cassette holds images. Any other model (a scripted one, your own object) gets them: images are
    an ``"images"`` key on tool outputs, which a model that cannot use them leaves alone.
    """
    return bool(getattr(model, "accepts_images", True))
