"""What stops a run that is not finished: the repeated-call, no-progress and tool-failure guards.

Budgets are in :mod:`agentkernel.usage`.

Each guard is a small object fed one fact at a time; a call is given by its name and its normalized arguments
(read once when the call is made: ``ToolCall.normalized``, or :func:`normalize_arguments`). Each check costs O(1)
per call (the no-progress window is a fixed small size), so the loop's per-round overhead does not grow with the
length of the run.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .endings import Trip
from .text import normalize_arguments, short

__all__ = ["FailureGuard", "GuardConfig", "NoProgressGuard", "RepeatedCallGuard", "normalize_arguments"]


@dataclass
class GuardConfig:
    """Guard thresholds. ``None`` or ``0`` switches a guard off."""

    repeat_limit: int | None = 3
    """Stop when one (tool, normalized arguments, output) signature has occurred this many times."""
    stuck_window: int | None = 8
    """Stop when the last this-many calls repeat with a period of 1-3 on (tool, normalized arguments)."""
    max_stale_turns: int | None = 3
    """Stop after this many model turns in a row that are empty or identical (outputs included) to the one before."""
    max_consecutive_failures: int | None = 3
    """Stop after this many rounds in a row in which every tool call failed."""


class RepeatedCallGuard:
    """Counts full (name, normalized arguments, output) signatures; no hashing shortcut, so no collisions."""

    def __init__(self, limit: int | None):
        self.limit = limit or 0
        self.counts: dict[tuple[str, str, str], int] = {}
        self.forgiven: set[tuple[str, str, str]] = set()

    def record(self, name: str, normalized: str, output: str) -> Trip | None:
        """Record a finished call by its name, normalized arguments and model-visible output."""
        if not self.limit:
            return None
        key = (name, normalized, output)
        self.counts[key] = count = self.counts.get(key, 0) + 1
        if count >= self.limit:
            return Trip(
                "repeated_tool_call",
                f"{name} {short(normalized)} returned the same output {count} times",
            )
        return None


    def forgive(self, name: str, normalized: str, output: str) -> None:
        """Compaction took this output out of the model's view: the next call like it is a legitimate re-read, not a
        repeat. Once per signature, so a model that keeps re-reading what compaction removes still trips."""
        key = (name, normalized, output)
        if key in self.counts and key not in self.forgiven:
            self.forgiven.add(key)
            self.counts[key] -= 1


class NoProgressGuard:
    """Detects grinding: a call cycle of period 1-3 filling the window, or stale model turns."""

    PERIODS = (1, 2, 3)

    def __init__(self, window: int | None, max_stale_turns: int | None):
        self.window = window or 0
        self.recent: deque[tuple[str, str]] = deque(maxlen=max(self.PERIODS))
        # For each period p: how many calls in a row have equalled the call p places before them. The last
        # `window` calls repeat with period p exactly when that run is at least window - p long, so each call
        # is checked in O(1) whatever the window size.
        self.runs = dict.fromkeys(self.PERIODS, 0)
        self.max_stale = max_stale_turns or 0
        self.stale = 0
        self.last_turn: tuple | None = None

    def record_call(self, name: str, normalized: str) -> Trip | None:
        """Record a call by its name and normalized arguments."""
        if not self.window:
            return None
        call = (name, normalized)
        for period in self.PERIODS:
            repeats = len(self.recent) >= period and self.recent[-period] == call
            self.runs[period] = self.runs[period] + 1 if repeats else 0
        self.recent.append(call)
        for period in self.PERIODS:
            if period < self.window and self.runs[period] >= self.window - period:
                cycle = ", ".join(f"{n} {short(a, 40)}" for n, a in list(self.recent)[-period:])
                return Trip(
                    "no_progress",
                    f"the last {self.window} tool calls repeat a cycle of {period}: {cycle}",
                )
        return None

    def record_turn(self, text: str, calls: list[tuple[str, str, str]]) -> Trip | None:
        """Record a model turn: its text and its calls as (name, normalized arguments, output).

        A turn is stale when it is empty, or when its text, its calls and what they returned all equal the turn
        before: the model learned nothing new. The same call getting a new output (polling) is progress.
        """
        if not self.max_stale:
            return None
        turn = (text.strip(), tuple(calls))
        empty = not turn[0] and not turn[1]
        self.stale = self.stale + 1 if empty or turn == self.last_turn else 0
        self.last_turn = turn
        if self.stale >= self.max_stale:
            return Trip("no_progress", f"{self.stale} model turns in a row were empty or repeated the one before")
        return None


class FailureGuard:
    """Counts rounds in a row in which every tool call failed."""

    def __init__(self, limit: int | None):
        self.limit = limit or 0
        self.failed_rounds = 0

    def record_round(self, failures: int, calls: int) -> Trip | None:
        if not self.limit or not calls:
            return None
        self.failed_rounds = self.failed_rounds + 1 if failures == calls else 0
        if self.failed_rounds >= self.limit:
            return Trip("tool_failure", f"every tool call failed in {self.failed_rounds} rounds in a row")
        return None
