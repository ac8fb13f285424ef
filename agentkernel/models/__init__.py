"""Models: one async streaming interface over OpenAI Responses, Chat Completions, and scripted turns."""

from .base import (
    FunctionCallEvent,
    FunctionCallProgress,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    Truncation,
    UsageEvent,
)
from .cassette import RecordingModel, ReplayModel
from .openai_chat import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel
from .scripted import Call, ScriptedModel, Turn

__all__ = [
    "Call", "FunctionCallEvent", "FunctionCallProgress", "Model", "ModelError", "ModelEvent", "ModelRequest",
    "OpenAIChatModel", "OpenAIResponsesModel", "RecordingModel", "ReplayModel", "ScriptedModel", "TextDelta",
    "Truncation", "Turn", "UsageEvent",
]
