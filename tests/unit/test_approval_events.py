"""Approvals are events: the runner, where an approval is decided, tells ``ApprovalAsked`` and ``ApprovalDecided``
(who decided, how long it waited, the note, the reason) through the run's listeners, redacted like every event; the
timeline builds its approval entries from them and the JSONL transcript records them, so a terminal or headless
run's record shows its approvals without a panel. No kernel: scripted models and plain approvers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import run_sync

import agentkernel
from agentkernel import Call, ScriptedModel, tool
from agentkernel.events import ApprovalAsked, ApprovalDecided, Event, ToolCallFinished, ToolCallStarted
from agentkernel.jupyter.approvals import nobody_approver
from agentkernel.listeners.timeline import Timeline
from agentkernel.secrets import KERNEL
from agentkernel.tools import Decision, Tool, ToolCall

SECRET = "a-vault-value-for-approvals-0123"


@tool(read_only=False)
def write(text: str) -> str:
    """Write ``text`` (side effects)."""
    return "written"


def approvals(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, ApprovalAsked | ApprovalDecided)]


def run_with(approve: Any, calls: int = 1, **options: Any) -> tuple[list[Event], Timeline]:
    events: list[Event] = []
    timeline = Timeline()
    script = [*(Call("write", {"text": f"x{i}"}) for i in range(calls)), "done"]
    run_sync("go", model=ScriptedModel(script), tools=[write], approve=approve,
             on_event=[events.append, timeline], **options)
    return events, timeline


def test_an_approved_call_is_asked_then_decided_by_the_user_before_it_runs() -> None:
    events, timeline = run_with(lambda call, t: True)
    asked, decided = approvals(events)
    assert isinstance(asked, ApprovalAsked) and isinstance(decided, ApprovalDecided)
    assert asked.call.call_id == decided.call.call_id and decided.call.name == "write"
    assert (decided.approved, decided.by, decided.for_run, decided.stopped) == (True, "user", False, False)
    assert decided.waited >= 0
    # in order: the call starts, is asked about, decided, then finishes
    kinds = [type(e) for e in events if isinstance(e, ApprovalAsked | ApprovalDecided | ToolCallStarted
                                                      | ToolCallFinished)]
    assert kinds == [ToolCallStarted, ApprovalAsked, ApprovalDecided, ToolCallFinished]
    assert [e.title() for e in timeline if e.kind == "approval"] == ["approval: write · approved"]


def test_approved_for_the_run_the_later_calls_are_decided_by_the_rule_unasked() -> None:
    events, timeline = run_with(lambda call, t: Decision(True, for_run=True), calls=3)
    told = approvals(events)
    assert [type(e).__name__ for e in told] == ["ApprovalAsked", "ApprovalDecided", "ApprovalDecided",
                                                "ApprovalDecided"]
    assert [e.by for e in told if isinstance(e, ApprovalDecided)] == ["user", "rule", "rule"]
    assert [e.title() for e in timeline if e.kind == "approval"] == [
        "approval: write · approved for the rest of this run"]


def test_a_headless_denial_says_who_and_why_and_shows_in_the_timeline() -> None:
    events, timeline = run_with(nobody_approver("CI is set", {}))
    decided = approvals(events)[-1]
    assert isinstance(decided, ApprovalDecided)
    assert (decided.approved, decided.by) == (False, "headless")
    assert decided.reason.startswith("nobody can approve it: CI is set")
    (entry,) = [e for e in timeline if e.kind == "approval"]
    assert entry.title().startswith("approval: write · denied: nobody can approve it: CI is set")
    assert timeline.denied == 1 and timeline.waiting_since() is None


@pytest.mark.parametrize(("approve", "by", "reason"), [
    (None, "policy", "no one is there to approve it"),
    (lambda call, t: 1 / 0, "policy", "the approval failed (ZeroDivisionError: division by zero)"),
    (lambda call, t: "yes", "user", "the approver answered 'yes', not True"),
    (lambda call, t: False, "user", ""),
])
def test_every_denial_is_decided_once_with_who(approve: Any, by: str, reason: str) -> None:
    events, _ = run_with(approve)
    decided = [e for e in approvals(events) if isinstance(e, ApprovalDecided)]
    assert [(d.approved, d.by, d.reason) for d in decided] == [(False, by, reason)]


def test_a_note_and_the_arguments_are_redacted_on_the_way_out(tmp_path: Path) -> None:
    try:
        agentkernel.secrets.add(SECRET, name="vault")
        events: list[Event] = []
        transcript = tmp_path / "run.jsonl"
        run_sync("go", model=ScriptedModel([Call("write", {"text": SECRET}), "done"]), tools=[write],
                 approve=lambda call, t: Decision(False, note=f"not {SECRET}"), on_event=events.append,
                 transcript=transcript)
    finally:
        KERNEL.clear()
    told = approvals(events)
    assert told and all(SECRET not in repr(e) for e in told)
    decided = told[-1]
    assert isinstance(decided, ApprovalDecided) and decided.note == "not [secret $vault]"
    text = transcript.read_text()
    assert SECRET not in text
    records = [json.loads(line) for line in text.splitlines()]
    kept = [r for r in records if r["event"].startswith("approval")]
    assert isinstance(kept[-1].pop("waited"), float)
    assert kept == [
        {"event": "approval_asked", "call_id": decided.call.call_id, "tool": "write"},
        {"event": "approval", "call_id": decided.call.call_id, "tool": "write", "approved": False, "by": "user",
         "note": "not [secret $vault]"}]


def test_stop_while_an_approval_waits_decides_it_stopped() -> None:
    async def main() -> tuple[list[Event], Timeline]:
        events: list[Event] = []
        timeline = Timeline()
        asked = asyncio.Event()

        async def never(call: ToolCall, t: Tool) -> bool:
            asked.set()
            await asyncio.Event().wait()
            return True

        task = asyncio.ensure_future(agentkernel.run(
            "go", model=ScriptedModel([Call("write", {"text": "x"}), "done"]), tools=[write], approve=never,
            on_event=[events.append, timeline]))
        await asyncio.wait_for(asked.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return events, timeline

    events, timeline = asyncio.run(main())
    decided = approvals(events)[-1]
    assert isinstance(decided, ApprovalDecided) and decided.stopped and not decided.approved
    assert [e.title() for e in timeline if e.kind == "approval"] == ["approval: write · denied: the run was stopped"]


verdicts = st.one_of(st.booleans(), st.builds(Decision, st.booleans(), st.booleans(), st.text(max_size=5)),
                     st.none(), st.integers(-1, 2))


@settings(max_examples=40, deadline=None)
@given(st.lists(verdicts, min_size=1, max_size=5))
def test_every_asked_approval_is_decided_once_and_the_decision_is_what_ran(answers: list[Any]) -> None:
    """Whatever an approver answers, each call asked about gets exactly one decision, after it was asked, and a call
    runs if and only if its decision approved it."""
    queue = list(answers)
    events, timeline = run_with(lambda call, t: queue.pop(0) if queue else False, calls=len(answers))
    asked: dict[str, int] = {}
    decided: dict[str, ApprovalDecided] = {}
    for i, event in enumerate(events):
        if isinstance(event, ApprovalAsked):
            asked[event.call.call_id] = i
        elif isinstance(event, ApprovalDecided):
            assert event.call.call_id not in decided
            assert event.by == "rule" or asked.get(event.call.call_id, len(events)) < i
            decided[event.call.call_id] = event
    finished = {e.result.call.call_id: e.result.status for e in events if isinstance(e, ToolCallFinished)}
    assert set(decided) == set(finished)
    assert all((finished[c] == "ok") == d.approved for c, d in decided.items())
    assert timeline.waiting_since() is None
    assert len([e for e in timeline if e.kind == "approval"]) == len(asked)
