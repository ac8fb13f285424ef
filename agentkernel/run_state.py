"""A run's counters as it goes (rounds, calls, denials, findings, compactions, the last text), which become its
:class:`~agentkernel.result.LoopResult` when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .endings import Trip
from .record import history as h
from .record.context import Compaction
from .result import LoopResult
from .text import valid_text
from .tools import ToolResult
from .usage import Usage


@dataclass
class RunState:
    """What a run has done so far; :meth:`result` is it as a :class:`LoopResult`."""

    rounds: int = 0
    tool_calls: int = 0
    denied_calls: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    """Each call that answered ``ok``: its tool, arguments and output (``partial_findings``)."""
    last_text: str | None = None
    compactions: list[Compaction] = field(default_factory=list)
    overflows: int = 0
    """Requests refused as too long since the last one that was answered."""

    def tally(self, results: list[ToolResult]) -> None:
        """Count a round's committed results: the findings of those that answered, the denials."""
        for r in results:
            if r.status == "ok":
                self.findings.append({"tool": r.name, "arguments": r.arguments, "output": r.output})
            self.denied_calls += r.status == "denied"

    def result(self, trip: Trip, history: list[h.Item], usage: Usage, *, run_id: str, transcript: str | None,
               sources: dict[str, list[str]]) -> LoopResult:
        """The run as it ended on ``trip``."""
        return LoopResult(
            status=trip.status,
            answer=self.last_text,
            history=history,
            usage=usage,
            rounds=self.rounds,
            tool_calls=self.tool_calls,
            denied_calls=self.denied_calls,
            partial_findings=self.findings,
            detail=valid_text(trip.detail),
            compactions=len(self.compactions),
            run_id=run_id,
            transcript=transcript,
            **sources,
        )
