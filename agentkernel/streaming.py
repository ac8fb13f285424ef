"""One model request streamed into a :class:`Response`: its text, calls, thinking, usage and truncation, each event
handed on as it arrives; a model that fails its own way fails as a :class:`~agentkernel.models.base.ModelError`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .models.base import (
    FunctionCallEvent,
    FunctionCallProgress,
    Model,
    ModelError,
    ModelRequest,
    TextDelta,
    Thinking,
    Truncation,
    UsageEvent,
)
from .record.context import estimate
from .secrets import redact_text
from .text import short


@dataclass
class Response:
    """What one model request gave: its text, the calls it asked for, the server's reason if it cut it short, and
    its usage."""

    pieces: list[str] = field(default_factory=list)
    calls: list[FunctionCallEvent] = field(default_factory=list)
    truncated: str | None = None
    usage: UsageEvent | None = None
    """As the server reported it, or estimated (see :class:`UsageEvent`)."""
    thinking: list[dict[str, Any]] = field(default_factory=list)
    """The :class:`~agentkernel.models.base.Thinking` blocks it streamed, until the turn's first item takes them."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def streamed_tokens(self) -> int:
        """The tokens of what streamed (text and call arguments), estimated."""
        return estimate(self.text) + sum(estimate(call.arguments) for call in self.calls)


async def stream_into(response: Response, model: Model, request: ModelRequest, *,
                      text: Callable[[str], None] | None = None,
                      progress: Callable[[FunctionCallProgress], None] | None = None) -> None:
    """Stream ``request`` from ``model`` into ``response`` as it arrives. A turn's text pieces go to ``text`` and its
    calls' progress to ``progress`` (each may raise to cut the response); the aborted stream is closed at once (a
    model request is disconnected)."""
    turn = request.purpose == "turn"
    text, progress = (text, progress) if turn else (None, None)
    async with contextlib.aclosing(model.stream(request)) as stream:
        while True:
            try:
                event = await anext(stream)
            except StopAsyncIteration:
                return
            except ModelError:
                raise
            except Exception as error:  # a model that fails its own way: the run ends with a message all the same
                raise ModelError(model_fault(model, error)) from error
            if isinstance(event, TextDelta):
                response.pieces.append(event.text)
                if text is not None:
                    text(event.text)
            elif isinstance(event, FunctionCallProgress):
                if progress is not None:
                    progress(event)
            elif isinstance(event, FunctionCallEvent):
                response.calls.append(event)
            elif isinstance(event, UsageEvent):  # counted when the response ends (a later one replaces it)
                response.usage = event
            elif isinstance(event, Truncation):
                response.truncated = response.truncated or event.reason
            elif isinstance(event, Thinking):
                response.thinking.extend(event.blocks)


def model_fault(model: Model, error: Exception) -> str:
    """The message of a run ended by a model that raised something other than a :class:`ModelError`."""
    name = getattr(model, "name", type(model).__name__)
    secrets = getattr(model, "secrets", None)
    text = f"the model {name} failed: {type(error).__name__}: {short(str(error), 200)}"
    return redact_text(text, secrets() if callable(secrets) else ())
