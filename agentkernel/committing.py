"""The history a run commits to: each item validated, appended to the history and to the context view the model is
sent, and told to the listeners; call ids kept unique; whether the model has been shown a secret's marker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .models.base import THINKING_KEY, FunctionCallEvent
from .record import history as h
from .record.context import ContextView
from .secrets import MARKER_START
from .text import valid_text
from .tools import ToolCall, ToolResult


class RunHistory:
    """A run's :attr:`items` and the view of them (:attr:`context`); ``told(item)`` hears each committed item."""

    def __init__(self, items: list[h.Item], context: ContextView, told: Callable[[h.Item], None]):
        self.items = items
        self.context = context
        self.told = told
        self.shows_secrets = any(shows_secret(item) for item in items)
        """Has the model been shown a secret's marker? From then on the system prompt says what one is."""
        self.call_ids = {item["call_id"] for item in items if item.get("type") == "function_call"}

    def commit(self, item: h.Item) -> None:
        item = h.valid_item(item)
        self.shows_secrets = self.shows_secrets or shows_secret(item)
        self.items.append(item)
        self.context.append(item)
        self.told(item)

    def call(self, event: FunctionCallEvent, thinking: list[dict[str, Any]]) -> ToolCall:
        """Commit a requested call under its final call_id: a model (or server) that leaves a call_id empty or
        reuses one would break the call/output matching. ``thinking``: the turn's blocks not yet committed."""
        call_id = valid_text(event.call_id)
        base, n = call_id or "call", len(self.items)
        while not call_id or call_id in self.call_ids:
            call_id, n = f"{base}_{n}", n + 1
        self.call_ids.add(call_id)
        call = ToolCall(call_id, valid_text(event.name), valid_text(event.arguments))
        self.commit(turn_item(h.function_call(call.call_id, call.name, call.arguments), thinking))
        return call

    def text(self, text: str, thinking: list[dict[str, Any]]) -> str:
        """Commit a message's text (if any); return it as committed."""
        text = valid_text(text)
        if text:
            self.commit(turn_item(h.assistant_message(text), thinking))
        return text

    def results(self, results: list[ToolResult]) -> None:
        """Append each call's output, in request order."""
        for r in results:
            self.commit(h.function_call_output(r.call_id, r.output, synthetic=r.synthetic, images=list(r.images)))


def turn_item(item: h.Item, thinking: list[dict[str, Any]]) -> h.Item:
    """The turn's first item carries the :class:`~agentkernel.models.base.Thinking` blocks its response streamed (if
    any): taken from ``thinking``, which is left empty."""
    if thinking:
        item[THINKING_KEY] = list(thinking)
        thinking.clear()
    return item


def shows_secret(item: h.Item) -> bool:
    """Whether a user message or a tool output shows the model a secret's marker."""
    text = item.get("output") if item.get("type") == "function_call_output" else item.get("content")
    return isinstance(text, str) and MARKER_START in text
