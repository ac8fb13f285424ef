"""What a run returns whatever way it ends: the escape hatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .history import Item

STATUSES = (
    "complete",
    "aborted",
    "fatal_error",
    "repeated_tool_call",
    "no_progress",
    "tool_failure",
    "hit_iteration_cap",
    "hit_token_cap",
    "hit_wall_clock",
    "hit_tool_call_cap",
)


@dataclass
class Usage:
    """Tokens as the API reported them, summed over the run's model requests."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class LoopResult:
    """A finished run: why it ended, what it produced, and the history to resume from.

    ``run`` returns one for every ending (guard, budget, abort, model failure); it never raises for them.
    """

    status: str
    answer: str | None
    history: list[Item]
    usage: Usage
    rounds: int
    tool_calls: int
    partial_findings: list[dict[str, Any]] = field(default_factory=list)
    requires_human: bool = True
    summary: str = ""
    detail: str = ""
    """One sentence on why the run stopped (empty when complete)."""
    run_id: str = ""
    transcript: str | None = None
    """Path of the run's JSONL transcript, if one was written."""

    @property
    def code(self) -> str:
        """The status in upper case, e.g. ``REPEATED_TOOL_CALL``."""
        return self.status.upper()

    @property
    def message(self) -> str:
        """``CODE: detail``, the text a stopped cell shows."""
        return f"{self.code}: {self.detail}" if self.detail else self.code

    @property
    def ok(self) -> bool:
        return self.status == "complete"


def summarize(status: str, detail: str, rounds: int, tool_calls: int) -> str:
    """One sentence about a run, made without asking the model."""
    work = f"{rounds} round{'s' * (rounds != 1)} and {tool_calls} tool call{'s' * (tool_calls != 1)}"
    if status == "complete":
        return f"Answered after {work}."
    detail = " ".join(detail.split()).rstrip(".")  # an error message may span lines or end with its own period
    return f"Stopped with {status.upper()} after {work}{': ' + detail if detail else ''}."
