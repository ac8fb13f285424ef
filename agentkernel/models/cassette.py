"""Record a model's exchanges to a JSONL cassette, and replay them later with no network and no key.

A cassette holds one line per model request::

    {"model": "gpt-4.1-mini",
     "request": {"items": 3, "tools": ["read_file"], "fingerprint": "…", "system": "<hash>",
                 "schemas": {"read_file": "<hash>"},
                 "last": [<the items the model had not seen yet: the user message or the tool outputs,
                          without call ids>]},
     "events": [{"type": "text", "text": "…"}, {"type": "function_call", "call_id": "…", "name": "…",
                 "arguments": "…"}, {"type": "usage", "input_tokens": 12, "output_tokens": 3},
                {"type": "truncated", "reason": "length"},
                {"type": "thinking", "blocks": [<Anthropic's thinking blocks>]}],
     "error": "…"}                     # only when the request failed (replayed as the same ModelError)

A request refused as too long for the context window also holds ``"overflow"`` (its numbers), and one an LLM gateway
refused for the key's budget ``"gateway_budget": true``: each is replayed as the same kind of error.

The request part is a summary, not the request: a cassette never holds the system prompt (only a hash of it), an
API key or any header, and no value of the kernel's secret set (:mod:`agentkernel.secrets`): each is recorded
as its marker, ``[secret $NAME]``, so a replay in a kernel holding another value matches. A tool output's images are
recorded as references (``{"media_type", "width", "height", "bytes", "sha256"}``); a replay checks their type and
size, not their bytes. Cassettes written before ``system`` and ``schemas`` were recorded replay as before, without
those two checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from ..record.history import Item
from ..record.images import image_reference
from ..secrets import redact
from ..text import json_line, short
from .base import (
    ContextOverflowError,
    FunctionCallEvent,
    FunctionCallProgress,
    GatewayBudgetError,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    Thinking,
    Truncation,
    UsageEvent,
    accepts_images,
)


def model_secrets(model: object) -> list[str]:
    """The keys a model may use beside the kernel's secret set: its own (an OpenAI adapter's ``secrets()``)."""
    own = getattr(model, "secrets", None)
    return list(own()) if callable(own) else []


def _summary_item(item: Item) -> Item:
    """An item as a cassette records it: without its call id, and its images (if any) as references."""
    summary = {k: v for k, v in item.items() if k != "call_id"}
    if isinstance(item.get("images"), list):
        summary["images"] = [image_reference(image) for image in item["images"]]
    return summary


def _without_digests(items: list[Item]) -> list[Item]:
    """Items with their image references cut to type and size: what a replay compares. A figure redrawn by
    another matplotlib or Pillow version differs in its bytes (the PNG even names the version), not in what it
    shows."""
    return [{**item, "images": [{k: v for k, v in ref.items() if k in ("media_type", "width", "height")}
                                for ref in item["images"]]} if "images" in item else item for item in items]


def unseen_items(history: list[Item]) -> list[Item]:
    """The trailing items the model has not answered yet: user messages and tool outputs after its last turn."""
    start = len(history)
    while start > 0:
        previous = history[start - 1]
        if previous.get("type") == "function_call" or previous.get("role") == "assistant":
            break
        start -= 1
    return history[start:]


def summarize_request(request: ModelRequest, also: Sequence[str] = ()) -> dict[str, Any]:
    """What a cassette records of a request: enough to notice a replay going off script, nothing secret.

    ``fingerprint`` is a hash of the whole history with call ids left out (they differ between runs of a real
    model); ``last`` is the part of the history the model is answering. The kernel's secrets and the keys ``also``
    are recorded as their markers.
    """
    history = redact([_summary_item(item) for item in request.history], also)
    tail = len(unseen_items(request.history))
    schemas = {_tool_name(t): _digest(t) for t in request.tools}
    return {
        "items": len(request.history),
        "tools": sorted(schemas),
        "fingerprint": _digest(_without_digests(history)),
        "system": _digest(request.system),
        "schemas": dict(sorted(schemas.items())),
        "last": history[len(history) - tail:],
    }


def _tool_name(schema: dict[str, Any]) -> str:
    return str(schema.get("name") or schema.get("function", {}).get("name"))


def _digest(value: Any) -> str:
    """A short hash of a JSON value (keys sorted), to notice a change without storing the value."""
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def event_to_dict(event: ModelEvent) -> dict[str, Any]:
    """A model event as a JSON-ready dict (``type`` is ``text``, ``function_call``, ``usage`` or ``truncated``).

    :class:`FunctionCallProgress` is not recorded: it only tells a front end that a call is on its way.
    """
    if isinstance(event, TextDelta):
        return {"type": "text", "text": event.text}
    if isinstance(event, FunctionCallEvent):
        return {"type": "function_call", "call_id": event.call_id, "name": event.name, "arguments": event.arguments}
    if isinstance(event, UsageEvent):
        extra = {name: value for name, value in dataclasses.asdict(event).items()
                 if value and name not in ("input_tokens", "output_tokens")}  # as before: tokens always
        return {"type": "usage", "input_tokens": event.input_tokens, "output_tokens": event.output_tokens, **extra}
    if isinstance(event, Truncation):
        return {"type": "truncated", "reason": event.reason}
    if isinstance(event, Thinking):
        return {"type": "thinking", "blocks": event.blocks}
    raise TypeError(f"not a model event: {event!r}")


def event_from_dict(data: dict[str, Any]) -> ModelEvent:
    """The inverse of :func:`event_to_dict`."""
    kind = data.get("type")
    if kind == "text":
        return TextDelta(data["text"])
    if kind == "function_call":
        return FunctionCallEvent(call_id=data["call_id"], name=data["name"], arguments=data["arguments"])
    if kind == "usage":
        return UsageEvent(**{f.name: data[f.name] for f in dataclasses.fields(UsageEvent) if f.name in data})
    if kind == "truncated":
        return Truncation(str(data.get("reason") or "incomplete"))
    if kind == "thinking":
        return Thinking(list(data.get("blocks") or []))
    raise ValueError(f"unknown cassette event type {kind!r}")


class RecordingModel:
    """Wraps any model and appends each of its exchanges to a JSONL cassette as the exchange ends.

    ``RecordingModel(OpenAIResponsesModel("gpt-4.1-mini"), "run.jsonl")`` behaves exactly like the model it
    wraps. Its first exchange starts the file afresh (so recording a cell again never leaves the old run first in
    line for replay) and later ones are appended; ``append=True`` keeps what the file held. A request that fails
    is recorded with its ``error``; one cut short by an abort is recorded with ``"interrupted": true``.
    """

    def __init__(self, inner: Model, path: str | os.PathLike[str], *, append: bool = False):
        self.inner = inner
        self.path = Path(path)
        self.name = getattr(inner, "name", type(inner).__name__)
        self._fresh = not append
        # What the loop reads of a model to size its context view, recorded so a replay sizes it the same way.
        self.max_output_tokens: int | None = getattr(inner, "max_output_tokens", None)
        self.estimates_usage: bool = getattr(inner, "estimates_usage", False)
        self.context_window: int | None = None

    async def discover_context_window(self) -> int | None:
        discover = getattr(self.inner, "discover_context_window", None)
        self.context_window = await discover() if discover is not None else None
        return self.context_window

    def _sizing(self) -> dict[str, Any]:
        sizing = {"window": self.context_window, "max_output_tokens": self.max_output_tokens,
                  "estimates_usage": self.estimates_usage or None}
        return {k: v for k, v in sizing.items() if v is not None}

    @property
    def accepts_images(self) -> bool:
        """As the wrapped model (see :func:`agentkernel.models.base.accepts_images`)."""
        return accepts_images(self.inner)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        secrets = model_secrets(self.inner)
        record: dict[str, Any] = {"model": self.name, "request": summarize_request(request, secrets), "events": []}
        if sizing := self._sizing():
            record["context"] = sizing
        try:
            async with contextlib.aclosing(self.inner.stream(request)) as stream:  # an abort closes it at once
                async for event in stream:
                    if not isinstance(event, FunctionCallProgress):
                        record["events"].append(event_to_dict(event))
                    yield event
        except ModelError as error:
            record["error"] = str(error)
            if isinstance(error, ContextOverflowError):
                record["overflow"] = {"window": error.window, "prompt_tokens": error.prompt_tokens}
            if isinstance(error, GatewayBudgetError):
                record["gateway_budget"] = True
            raise
        except BaseException:
            record["interrupted"] = True
            raise
        finally:
            # The request summary is redacted already (summarize_request): only what came back needs it.
            self._write({**redact({k: v for k, v in record.items() if k != "request"}, secrets),
                         "request": record["request"]})

    def _write(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w" if self._fresh else "a", encoding="utf-8") as file:
            file.write(json_line(record) + "\n")  # model text may hold lone surrogates
        self._fresh = False


class ReplayModel:
    """Plays a cassette back, one recorded exchange per request, with no network and no key.

    Call ids, text, usage and errors come back exactly as recorded. It raises :class:`ModelError` when the
    loop asks for more requests than the cassette holds, or when a request clearly differs from the recorded
    one (another prompt, other tool outputs, other tools or tool schemas, another system prompt, a different
    history); the message says what differs.
    ``strict=False`` skips the request checks.
    """

    def __init__(self, path: str | os.PathLike[str], *, strict: bool = True):
        self.path = Path(path)
        self.strict = strict
        self.exchanges: list[dict[str, Any]] = []
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                exchange = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{self.path}:{number} is not a cassette line ({e.msg})") from None
            try:
                if not isinstance(exchange, dict) or not isinstance(exchange.get("events", []), list):
                    raise TypeError('not an object with a list of "events"')
                for event in exchange.get("events", []):
                    event_from_dict(event)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{self.path}:{number} is not a cassette line ({_reason(e)})") from None
            self.exchanges.append(exchange)
        recorded = self.exchanges[0].get("model") if self.exchanges else None
        self.name = f"replay of {recorded}" if recorded else "replay"
        self.requests = 0
        self.accepts_images = any("images" in item for exchange in self.exchanges
                                  for item in exchange.get("request", {}).get("last") or [])
        """Whether the recorded run gave the model images: a replay then gives them too, else its requests differ."""
        sizing = self.exchanges[0].get("context", {}) if self.exchanges else {}
        self.max_output_tokens: int | None = sizing.get("max_output_tokens")
        self.estimates_usage: bool = bool(sizing.get("estimates_usage"))
        self._window: int | None = sizing.get("window")

    async def discover_context_window(self) -> int | None:
        """The window the recorded model's server gave, so the replayed run compacts where the recorded one did."""
        return self._window

    @property
    def remaining(self) -> int:
        """How many recorded exchanges have not been played yet."""
        return len(self.exchanges) - self.requests

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        number = self.requests + 1
        if self.requests >= len(self.exchanges):
            raise ModelError(f"the cassette {self.path.name} holds {len(self.exchanges)} model request(s), "
                             f"but the run asked for request {number}: re-record it")
        exchange = self.exchanges[self.requests]
        self.requests += 1
        if self.strict:
            differences = compare_requests(exchange.get("request", {}), summarize_request(request))
            if differences:
                raise ModelError(f"request {number} does not match the cassette {self.path.name}: "
                                 + "; ".join(differences))
        for data in exchange.get("events", []):
            yield event_from_dict(data)
        if "overflow" in exchange:
            raise ContextOverflowError(exchange["error"], **exchange["overflow"])
        if exchange.get("gateway_budget") is True and "error" in exchange:
            raise GatewayBudgetError(exchange["error"])
        if "error" in exchange:
            raise ModelError(exchange["error"])
        if exchange.get("interrupted"):
            raise ModelError(f"the cassette {self.path.name} was recorded from a run stopped during request "
                             f"{number}; it holds nothing after this point")


def _reason(error: Exception) -> str:
    return f"an event lacks {error}" if isinstance(error, KeyError) else str(error) or type(error).__name__


def compare_requests(recorded: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Readable differences between a recorded request summary and a live one (empty when they match)."""
    differences = []
    if _without_digests(recorded.get("last") or []) != _without_digests(live["last"]):
        was, now = (short(json.dumps(value, ensure_ascii=False), 200) for value in (recorded.get("last"), live["last"]))
        differences.append(f"the new input differs: recorded {was}, now {now}")
    if recorded.get("tools") != live["tools"]:
        differences.append(f"the tools differ: recorded {recorded.get('tools')}, now {live['tools']}")
    elif "schemas" in recorded and recorded["schemas"] != live["schemas"]:
        changed = [name for name in live["schemas"] if recorded["schemas"].get(name) != live["schemas"][name]]
        differences.append(f"the schema (description or parameters) of {', '.join(changed)} differs from the "
                           "recording")
    if "system" in recorded and recorded["system"] != live["system"]:
        differences.append("the system prompt differs from the recording")
    if recorded.get("items") != live["items"]:
        differences.append(f"the history has {live['items']} items, the recording had {recorded.get('items')}")
    if not differences and recorded.get("fingerprint") != live["fingerprint"]:
        differences.append("the earlier history differs from the recording")
    return differences
