"""Models: one async streaming interface over OpenAI Responses, Chat Completions, and scripted turns."""

from .base import FunctionCallEvent, Model, ModelError, ModelEvent, ModelRequest, TextDelta, UsageEvent
from .scripted import Call, ScriptedModel, Turn

__all__ = [
    "Call", "FunctionCallEvent", "Model", "ModelError", "ModelEvent", "ModelRequest", "ScriptedModel",
    "TextDelta", "Turn", "UsageEvent",
]
