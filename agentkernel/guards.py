"""What stops a run that is not finished: the repeated-call, no-progress, tool-failure and text-loop guards.

Budgets are in :mod:`agentkernel.usage`.

Each guard is a small object fed one fact at a time; a call is given by its name and its normalized arguments
(read once when the call is made: ``ToolCall.normalized``, or :func:`normalize_arguments`). Each check costs O(1)
per call (the no-progress window is a fixed small size), so the loop's per-round overhead does not grow with the
length of the run. The text-loop guard reads a response's text as it streams, at a constant cost per character
whatever the length of the response.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from .endings import Trip
from .text import normalize_arguments, short

if TYPE_CHECKING:
    from .tools import ToolResult

__all__ = ["FailureGuard", "GuardConfig", "NoProgressGuard", "RepeatedCallGuard", "TextLoopGuard",
           "normalize_arguments"]


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
    text_repeats: int | None = 10
    """Cut a response whose text repeats one chunk this many times (see :class:`TextLoopGuard`); at least 2."""


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


@dataclass(slots=True)
class _Chunk:
    """Where one chunk of a response was seen lately: a streak, each sighting within MAX_PERIOD of the one before."""

    positions: deque[int]
    start: int
    count: int = 1


@dataclass
class _Lines:
    """Which lines of a response the text-loop guard reads: not code blocks, not table rows."""

    in_code: bool = False
    head: str = ""  # the start of the current line while it is too short to tell what it is
    reading: bool | None = None  # is the current line read? (None: not known yet)

    def prose(self, delta: str) -> str:
        """The part of ``delta`` the guard reads; a line it skips leaves its newline."""
        if self.reading and "\n" not in delta and "\r" not in delta:
            return delta  # more of a line being read: the common case
        out: list[str] = []
        for piece in delta.splitlines(keepends=True):
            ends = piece.endswith(("\n", "\r"))
            if self.reading is None:
                self.head += piece
                start = self.head.lstrip()
                if len(start) < 3 and not ends:
                    continue  # "``" may be the start of a fence
                fence = start.startswith(("```", "~~~"))
                self.reading = not (fence or self.in_code or start.startswith("|"))
                self.in_code ^= fence
                piece, self.head = self.head, ""
            if self.reading:
                out.append(piece)
            elif ends:
                out.append("\n")
            if ends:
                self.reading = None
        return "".join(out)


_WORD_START = re.compile(r"(?<!\w)\w")
_SENTENCE_START = re.compile(r"(?<=[.!?:;\n])\s*(?=\w)")


class TextLoopGuard:
    """Cuts a response that repeats itself: the same chunk of text coming back again and again as it streams.

    Gemini CLI's content-loop check, made robust to how the text is split into deltas: a chunk is the
    :attr:`CHUNK` characters from the start of a word; the response is cut when one chunk has been seen
    ``repeats`` times, each within :attr:`MAX_PERIOD` characters of the one before, covering at least
    :attr:`MIN_SPAN` characters, and the text from one sighting to the next (the period) takes at most
    ``repeats // 2`` distinct values over the last ``repeats`` sightings. That last rule is what keeps a list
    or a table of similar lines from tripping it: similar lines share chunks but differ somewhere in each
    period, where a loop's periods are the same one or two over and over. Code blocks (between fences) and
    table rows (lines starting with ``|``) are not read at all; chunks start at words, so dividers, dot leaders
    and runs of one character never count; :attr:`MIN_SPAN` spares short repeats (``0, 0, 0, ...``).

    Feed it every text delta of one response (:meth:`feed`), and :meth:`reset` it before the next response.
    The cost is constant per character of text, and what it keeps is bounded, however long the response.
    """

    CHUNK = 50
    MAX_PERIOD = 250
    MIN_SPAN = 250

    def __init__(self, repeats: int | None = 10):
        if repeats == 1:
            raise ValueError("repeats must be 0 (off) or at least 2: a chunk seen once is no repeat")
        self.repeats = repeats or 0
        self.reset()

    def reset(self) -> None:
        """Forget the response read so far (for the next one)."""
        if getattr(self, "_fresh", False):  # nothing was read since the last reset (a response of calls only)
            return
        self._fresh = True
        self._lines = _Lines()
        self._text = ""  # the text read, from the absolute position _offset on (the rest is forgotten)
        self._waiting: list[str] = []  # read but not yet looked at, self._count characters
        self._count = 0
        self._offset = 0
        self._next = 0  # the first absolute position not yet looked at
        self._chunks: dict[str, _Chunk] = {}
        self._order: deque[tuple[int, str]] = deque()  # (position, chunk) as seen, to forget old ones

    def feed(self, delta: str) -> Trip | None:
        """Read the next text delta of the response; a :class:`Trip` (``no_progress``) when it repeats itself."""
        if not self.repeats:
            return None
        self._fresh = False
        prose = self._lines.prose(delta)
        self._waiting.append(prose)
        self._count += len(prose)
        if self._count < self.CHUNK:  # read in batches: a delta is often a token, and the text is kept as one str
            return None
        self._text += "".join(self._waiting)
        self._waiting.clear()
        self._count = 0
        end = self._offset + len(self._text) - self.CHUNK + 1  # a chunk needs CHUNK characters after its start
        text, offset = self._text, self._offset
        for match in _WORD_START.finditer(text, self._next - offset, end - offset):
            if trip := self._sighting(match.start() + offset):
                return trip
        self._next = end
        keep = self.repeats * self.MAX_PERIOD + self.CHUNK  # the text the period check may look at
        if len(text) > 2 * keep:
            cut = len(text) - keep
            self._text, self._offset = text[cut:], offset + cut
        return None

    def _sighting(self, at: int) -> Trip | None:
        chunks, order = self._chunks, self._order
        while order and order[0][0] < at - self.MAX_PERIOD:  # a chunk unseen for MAX_PERIOD has lost its streak
            gone, key = order.popleft()
            if chunks[key].positions[-1] == gone:
                del chunks[key]
        i = at - self._offset
        key = self._text[i:i + self.CHUNK]
        order.append((at, key))
        chunk = chunks.get(key)
        if chunk is None:
            chunks[key] = _Chunk(deque([at], maxlen=self.repeats), at)
            return None
        chunk.positions.append(at)
        chunk.count += 1
        if len(chunk.positions) < self.repeats or at + self.CHUNK - chunk.start < self.MIN_SPAN:
            return None
        sightings = [p - self._offset for p in chunk.positions]
        periods = Counter(self._text[a:b] for a, b in pairwise(sightings))
        if len(periods) > self.repeats // 2:
            return None  # similar lines, not a loop
        period, _ = periods.most_common(1)[0]
        if start := _SENTENCE_START.search(period):  # show "She is. " rather than "is. She "
            period = period[start.end():] + period[:start.end()]
        return Trip("no_progress", f"the response repeated itself: {short(period, 70)!r} came back {chunk.count} "
                                   "times, so it was cut (the text so far is kept)")



class RunGuards:
    """A run's guards together, fed each round's outcomes: repeated calls, no progress, failing rounds, and the
    runaway text of a response (:attr:`text_loop`, fed as it streams)."""

    def __init__(self, config: GuardConfig):
        self.repeats = RepeatedCallGuard(config.repeat_limit)
        self.no_progress = NoProgressGuard(config.stuck_window, config.max_stale_turns)
        self.failures = FailureGuard(config.max_consecutive_failures)
        self.text_loop = TextLoopGuard(config.text_repeats)
        self.signatures: dict[str, tuple[str, str, str]] = {}
        """Each call's repeated-call signature (name, normalized arguments, output), by call_id."""

    def record_round(self, text: str, ran: list[ToolResult], refused: list[ToolResult]) -> Trip | None:
        """A round's outcomes after its ``text`` (``ran``: the calls that ran; ``refused``: those the tool-call
        budget did not run): the first guard that trips, or None."""
        trip = None
        outcomes = []
        for r in ran:
            call = r.call
            self.signatures[call.call_id] = signature = (call.name, call.normalized, r.output)
            outcomes.append(signature)
            trip = trip or self.repeats.record(*signature) or self.no_progress.record_call(call.name, call.normalized)
        outcomes += [(r.call.name, r.call.normalized, r.output) for r in refused]
        trip = trip or self.no_progress.record_turn(text, outcomes)
        return trip or self.failures.record_round(sum(r.status == "error" for r in ran), len(ran))

    def record_empty_turn(self) -> Trip | None:
        """A turn with neither text nor calls."""
        return self.no_progress.record_turn("", [])

    def forgive(self, call_id: str) -> None:
        """An output the model no longer sees (compacted away) may be fetched again once without counting as a
        repeat."""
        signature = self.signatures.get(call_id)
        if signature is not None:
            self.repeats.forgive(*signature)
