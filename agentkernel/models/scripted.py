"""A deterministic model for tests and teaching: no key, no network."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..record.context import describe_turns
from ..text import dumps
from .base import (
    FunctionCallEvent,
    FunctionCallProgress,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    Truncation,
    UsageEvent,
)


@dataclass
class Call:
    """A tool call in a scripted turn. ``arguments`` may be a dict (serialized as given) or a raw string."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None


@dataclass
class Turn:
    """One scripted model response: some text and/or tool calls, streamed with an optional delay per chunk."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    delay: float = 0.0
    error: str | None = None
    """If set, the model fails with this message (a ``ModelError``) instead of answering."""
    truncated: str | None = None
    """If set, the response ends as if the server cut it short, with this reason (``length``, ...)."""


TurnLike = Turn | str | Call | list[Call] | dict[str, Any]
Script = Sequence[TurnLike] | Callable[[ModelRequest], TurnLike]


def as_turn(value: TurnLike) -> Turn:
    """Accept the short forms: a string is a final answer, a Call or list of Calls is a tool round."""
    if isinstance(value, Turn):
        return value
    if isinstance(value, str):
        return Turn(text=value)
    if isinstance(value, Call):
        return Turn(calls=[value])
    if isinstance(value, list):
        return Turn(calls=list(value))
    if isinstance(value, dict):
        calls = [c if isinstance(c, Call) else Call(**c) for c in value.get("calls", [])]
        return Turn(text=value.get("text", ""), calls=calls, delay=value.get("delay", 0.0),
                    error=value.get("error"), truncated=value.get("truncated"))
    raise TypeError(f"cannot make a scripted turn from {type(value).__name__}")


class ScriptedModel:
    """Plays turns from a list (one per request) or from a function of the request.

    ``ScriptedModel(["Hello!"])`` answers once; ``ScriptedModel(lambda req: ...)`` decides from the history.
    Text is streamed word by word, waiting ``delay`` seconds (the turn's, else the model's) between chunks,
    so a slow run can be stopped mid-stream; with a delay each call is also announced
    (``FunctionCallProgress``) by name, then after ``delay`` with its arguments' size, before it is complete.
    Usage is counted as one token per word.

    A compaction's summary request (``request.purpose == "summary"``) uses up no scripted turn: it is answered by
    ``summary(request)`` if given, else by the runtime's own note on the turns (:func:`describe_turns`).

    Each run plays a list from its first turn: a request naming another run (its ``cache_key``, the run's id)
    than the one before starts the list again, so a cell run twice gives the same answer and a run stopped half way
    (at an approval, say) does not leave the next run the rest of the script.
    """

    estimates_usage = True
    """Its usage counts words, not the request: the context view keeps to its own estimate of the fill."""

    def __init__(self, script: Script, *, name: str = "scripted", delay: float = 0.0,
                 summary: Callable[[ModelRequest], str] | None = None):
        self.script = script
        self.name = name
        self.delay = delay
        self.summary = summary
        self.requests = 0
        """Requests answered in the current run."""
        self.run: str | None = None
        """The run (``ModelRequest.cache_key``) the last request came from."""
        self.numbered = -1  # the number of the last turn's call ids

    def next_turn(self, request: ModelRequest) -> Turn:
        if request.cache_key != self.run:
            self.run, self.requests = request.cache_key, 0
        index = self.requests
        self.requests += 1
        if callable(self.script):
            return as_turn(self.script(request))
        if index >= len(self.script):
            raise ModelError(f"the scripted model has no turn {index + 1} (it holds {len(self.script)}, and this run "
                             "has used them all: end the script with an answer, or give it more turns)")
        return as_turn(self.script[index])

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose == "summary":
            note = self.summary(request) if self.summary else describe_turns(request.history[:-1])
            yield TextDelta(note)
            yield UsageEvent(input_tokens=0, output_tokens=len(note.split()))
            return
        turn = self.next_turn(request)
        delay = turn.delay or self.delay
        if turn.error:
            raise ModelError(turn.error)
        words = turn.text.split(" ") if turn.text else []
        for i, word in enumerate(words):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(word if i == 0 else " " + word)
        # Numbered by the history's length, not by this model's request count, so a run resumed from an earlier
        # history (often with a fresh model) never reuses that history's call ids; and never below the last
        # number, since a compacted history is shorter than the one before it.
        self.numbered = number = max(len(request.history), self.numbered + 1)
        for i, call in enumerate(turn.calls):
            arguments = call.arguments if isinstance(call.arguments, str) else dumps(call.arguments)
            call_id = call.call_id or f"call_{number}_{i + 1}"
            if delay:  # stream like an API: the call's name first, its arguments a moment later
                yield FunctionCallProgress(call_id, call.name, 0)
                await asyncio.sleep(delay)
                yield FunctionCallProgress(call_id, call.name, len(arguments))
            yield FunctionCallEvent(call_id=call_id, name=call.name, arguments=arguments)
        if turn.truncated:
            yield Truncation(turn.truncated)
        prompt_words = sum(len(str(item.get("content") or item.get("output") or "").split())
                           for item in request.history[-4:])
        yield UsageEvent(input_tokens=prompt_words, output_tokens=len(words) + 10 * len(turn.calls))
