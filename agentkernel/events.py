"""What the loop tells its listeners (the notebook panel, a CLI, a test) while it runs."""

from __future__ import annotations

from dataclasses import dataclass

from .models.base import FunctionCallProgress, TextDelta
from .record.context import Compaction
from .result import LoopResult
from .tools.base import ToolCall, ToolResult
from .usage import Usage


@dataclass
class RunStarted:
    run_id: str
    model: str


@dataclass
class RoundStarted:
    round: int


@dataclass
class MessageDone:
    """The assistant finished a message (the full text of what was streamed as :class:`TextDelta`)."""

    text: str


@dataclass
class ToolCallStarted:
    call: ToolCall


@dataclass
class ToolCallFinished:
    """A call has its outcome (``result.status``: ok, error, denied, aborted or not_run)."""

    result: ToolResult


@dataclass
class UsageUpdated:
    usage: Usage


@dataclass
class ContextUpdated:
    """How full the model's context window is expected to be for the next request (``window`` None: unknown)."""

    fill: int
    window: int | None


@dataclass
class ContextCompacted:
    """The model's view of the history was compacted (the history itself is unchanged)."""

    compaction: Compaction


@dataclass
class RunFinished:
    result: LoopResult


Event = (
    RunStarted | RoundStarted | TextDelta | FunctionCallProgress | MessageDone | ToolCallStarted | ToolCallFinished
    | UsageUpdated | ContextUpdated | ContextCompacted | RunFinished
)

__all__ = [
    "ContextCompacted", "ContextUpdated",
    "Event", "FunctionCallProgress", "MessageDone", "RoundStarted", "RunFinished", "RunStarted", "TextDelta",
    "ToolCallFinished", "ToolCallStarted", "UsageUpdated",
]
