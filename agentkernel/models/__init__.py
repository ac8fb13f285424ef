"""Models: one async streaming interface over OpenAI Responses, Chat Completions, Anthropic Messages, and scripted
turns.

The SDK adapters (and so the ``openai`` and ``anthropic`` SDKs) are imported when first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import (
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
)
from .cassette import RecordingModel, ReplayModel
from .scripted import Call, ScriptedModel, Turn

if TYPE_CHECKING:
    from .anthropic_messages import AnthropicMessagesModel
    from .openai_chat import OpenAIChatModel
    from .openai_responses import OpenAIResponsesModel

_LAZY = {"AnthropicMessagesModel": ".anthropic_messages", "OpenAIChatModel": ".openai_chat",
         "OpenAIResponsesModel": ".openai_responses"}

__all__ = [
    "AnthropicMessagesModel", "Call", "FunctionCallEvent", "FunctionCallProgress", "GatewayBudgetError", "Model",
    "ModelError", "ModelEvent",
    "ModelRequest", "OpenAIChatModel", "OpenAIResponsesModel", "RecordingModel", "ReplayModel", "ScriptedModel",
    "TextDelta", "Thinking", "Truncation", "Turn", "UsageEvent",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
