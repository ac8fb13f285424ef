"""What a run returns whatever way it ends: the escape hatch."""

from __future__ import annotations

import dataclasses
import html
import json
from dataclasses import dataclass, field
from typing import Any

from .endings import Status
from .record.history import Item
from .text import reveal, short
from .usage import Usage

ANSWER_LINES = 8
"""How much of the answer a notebook display of a result shows (the whole answer is in ``answer``)."""


@dataclass
class LoopResult:
    """A finished run: why it ended, what it produced, and the history to resume from.

    :func:`agentkernel.run` returns one for every ending (guard, budget, abort, model failure); it never raises
    for them. The envelope is ``status``, ``answer``, ``partial_findings``, ``requires_human`` and ``summary``;
    ``detail`` is the one sentence of why a run stopped, and the status code shown in error cells is
    ``status.upper()``.
    """

    status: Status
    answer: str | None
    """The model's last message, or ``None`` if it wrote none."""
    history: list[Item] = field(repr=False)
    """Every item of the conversation (Responses item shape); each ``function_call`` has its output."""
    usage: Usage = field(default_factory=Usage)
    rounds: int = 0
    """Model requests made."""
    tool_calls: int = 0
    """Tool calls run (calls refused by a budget are not counted)."""
    denied_calls: int = 0
    """Side-effecting calls that were not approved (denied by the user, by no answer, or with nobody to ask)."""
    partial_findings: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """``{"tool", "arguments", "output"}`` of every call that succeeded, in order: what was learned so far."""
    detail: str = ""
    """One sentence on why the run stopped (empty when complete)."""
    compactions: int = 0
    """How many times the model's view of the history was compacted to fit its context window (the history
    itself is always whole)."""
    run_id: str = ""
    transcript: str | None = None
    """Path of the run's JSONL transcript, if one was written."""
    instructions: list[str] = field(default_factory=list)
    """Where the project instructions the model was told came from (``AGENTS.md``, ...), the nearest last."""
    skills: list[str] = field(default_factory=list)
    """The skills the model was offered, by name."""

    @property
    def loaded_skills(self) -> list[str]:
        """The skills the model loaded (``load_skill`` calls that succeeded), by name, in order."""
        return loaded_skills(self.history)

    @property
    def requires_human(self) -> bool:
        """True unless the model answered: a person should look at what happened."""
        return self.status != "complete"

    @property
    def work(self) -> str:
        """``3 rounds and 2 tool calls``."""
        return f"{_count(self.rounds, 'round')} and {_count(self.tool_calls, 'tool call')}"

    @property
    def detail_clause(self) -> str:
        """``detail`` as a clause to put in a sentence: on one line, no final period (an error message may span
        lines or end with its own)."""
        return " ".join(self.detail.split()).rstrip(".")

    @property
    def denied(self) -> str:
        """``1 call denied`` (empty when none was)."""
        return f"{_count(self.denied_calls, 'call')} denied" if self.denied_calls else ""

    @property
    def status_line(self) -> str:
        """``complete · 3 rounds · 2 tool calls · 12 in · 3 out · cost unknown`` (see :func:`status_line`)."""
        return status_line(self.status, self.rounds, self.tool_calls, self.denied_calls, self.usage, self.compactions,
                           briefing=briefing_line(self.instructions, self.skills, self.loaded_skills))

    @property
    def summary(self) -> str:
        """One sentence about the run, made without asking the model."""
        work = self.work
        denied = f" ({self.denied})" if self.denied_calls else ""
        used = f" Used {self.usage.line}." if self.usage.cost is not None else ""  # a priced run says what it cost
        if self.status == "complete":
            return f"Answered after {work}{denied}.{used}"
        detail = self.detail_clause
        return f"Stopped with {self.status.upper()} after {work}{denied}{': ' + detail if detail else ''}.{used}"

    # -- display in a notebook: a short summary, never the whole history -------------------------------------

    def _summary_lines(self) -> list[str]:
        """The display's lines; control characters the model wrote (an escape sequence) shown as ``⟨U+001B⟩``."""
        lines = [f"LoopResult: {self.status_line}"]
        if self.detail:
            lines.append(f"why: {short(self.detail, 300)}")
        if self.answer:
            answer = self.answer.strip().splitlines()
            lines.append("answer:")
            lines.extend(f"  {short(line, 200)}" for line in answer[:ANSWER_LINES])
            if len(answer) > ANSWER_LINES:
                lines.append(f"  … ({len(answer) - ANSWER_LINES} more lines in .answer)")
        lines.append(f"history: {_count(len(self.history), 'item')} in .history; "
                     f"{_count(len(self.partial_findings), 'finding')} in .partial_findings")
        return [reveal(line)[0] for line in lines]

    def _shown_lines(self) -> list[str]:
        """:meth:`_summary_lines` with the kernel's secrets as markers, as they are now (a result made outside a
        notebook run, or kept from before a secret was named, is shown with markers too)."""
        from .secrets import redact_text

        marked = dataclasses.replace(self, answer=None if self.answer is None else redact_text(self.answer),
                                     detail=redact_text(self.detail))  # before the lines cut them
        return [redact_text(line) for line in marked._summary_lines()]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("LoopResult(...)" if cycle else "\n".join(self._shown_lines()))

    def _repr_html_(self) -> str:
        head, *rest = self._shown_lines()
        body = html.escape("\n".join(rest))
        return f"<div><b>{html.escape(head)}</b><pre style='margin: 4px 0 0'>{body}</pre></div>"


def status_line(state: str, rounds: int, tool_calls: int, denied: int, usage: Usage, compactions: int = 0,
                seconds: float | None = None, briefing: str = "") -> str:
    """The one line a run's views show about it, live or finished: ``state · 3 rounds · 2 tool calls · 1 call
    denied · 12 in · 3 out · $0.0001 · 1 compaction · 4.2 s · instructions: AGENTS.md`` (the denials, compactions,
    seconds and the project's instructions and skills (:func:`briefing_line`) only when there are some; ``state`` is
    the status, or what the run is doing while it runs)."""
    parts = [state, _count(rounds, "round"), _count(tool_calls, "tool call")]
    parts += [f"{_count(denied, 'call')} denied"] if denied else []
    parts.append(usage.line)
    parts += [_count(compactions, "compaction")] if compactions else []
    parts += [f"{seconds:.1f} s"] if seconds is not None else []
    parts += [briefing] if briefing else []
    return " · ".join(parts)


def loaded_skills(history: list[Item]) -> list[str]:
    """The names of the skills ``load_skill`` loaded in ``history`` (calls that failed are left out)."""
    failed = {item["call_id"] for item in history if item.get("type") == "function_call_output"
              and str(item.get("output", "")).startswith(("error:", "not run", "aborted"))}
    names = []
    for item in history:
        if item.get("type") == "function_call" and item["call_id"] not in failed:
            name = loaded_skill(str(item.get("name")), str(item.get("arguments") or ""))
            if name is not None and name not in names:
                names.append(name)
    return names


def loaded_skill(tool: str, arguments: str) -> str | None:
    """The skill whose instructions a call of ``tool`` with ``arguments`` loads, or None (not ``load_skill``, or
    one reading a skill's other file)."""
    if tool != "load_skill":
        return None
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    name = parsed.get("name") if isinstance(parsed, dict) and not parsed.get("file") else None
    return name if isinstance(name, str) else None


def briefing_line(instructions: list[str], skills: list[str], loaded: list[str]) -> str:
    """``instructions: AGENTS.md, analysis/AGENTS.md · skills: house-plots (loaded), sql``."""
    parts = [f"instructions: {', '.join(instructions)}"] if instructions else []
    if skills:
        parts.append("skills: " + ", ".join(f"{name} (loaded)" if name in loaded else name for name in skills))
    return " · ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
