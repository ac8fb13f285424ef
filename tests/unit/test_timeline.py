"""The run's timeline (agentkernel/listeners/timeline.py): the one place the loop's events become the entries that the
live panel and the static record show. Fed by hand with events in orders a hostile stream could produce, and by a
real loop."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import run_sync

from agentkernel import Call, ScriptedModel, tool
from agentkernel.events import (
    FunctionCallProgress,
    MessageDone,
    RoundStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from agentkernel.listeners.timeline import HEAD_ENTRIES, TAIL_ENTRIES, WAITING, Entry, Timeline
from agentkernel.tools import Display, ToolCall, ToolResult
from agentkernel.usage import Limits


def finished(call_id: str, status: str = "ok", name: str = "look", arguments: str = "{}", output: str = "x"):
    return ToolCallFinished(ToolResult(ToolCall(call_id, name, arguments), status, output))  # type: ignore[arg-type]


def test_a_call_is_one_entry_from_the_first_characters_the_model_writes_to_its_result() -> None:
    added: list[Entry] = []
    timeline = Timeline(on_add=added.append)
    timeline(FunctionCallProgress("0", "look", 3))  # the stream's index: the call id is not known yet
    timeline(FunctionCallProgress("0", "look", 9))
    (entry,) = added
    assert entry.title() == "look(…) · writing · 9 characters" and entry.busy
    call = ToolCall("call_a", "look", '{"q": 1}')
    timeline(ToolCallStarted(call))
    assert entry.call is call and entry.title() == "look(q=1) · running"
    version = entry.version
    timeline(ToolCallFinished(ToolResult(call, "ok", "found")))
    assert timeline.entries == [entry] and entry.title() == "look(q=1) · ok" and not entry.busy
    assert entry.version > version  # a view knows it changed


def test_a_call_the_model_stopped_writing_is_dropped_when_the_next_round_starts() -> None:
    timeline = Timeline()
    timeline(FunctionCallProgress("k", "look", 5))
    timeline(RoundStarted(2))
    (entry,) = timeline.entries
    assert entry.dropped and not entry.busy and "dropped" in entry.title()


def test_identical_calls_never_run_are_one_entry_with_a_count_and_a_view_is_told() -> None:
    removed: list[Entry] = []
    timeline = Timeline(on_remove=removed.append)
    for i in range(19):
        timeline(FunctionCallProgress(str(i), "list_dir", 2))  # a cut response: 19 calls written, none run
    for i in range(19):
        timeline(finished(f"c{i}", "not_run", "list_dir", '{"path": "."}', "not run: the response was cut"))
    (entry,) = timeline.entries
    assert entry.count == 19 and entry.title() == 'list_dir(path=".") · not_run × 19'
    assert len(removed) == 18 and not timeline.calls.keys() - {"c0"}
    # A different output or a call that ran is its own entry.
    timeline(finished("d", "not_run", "list_dir", '{"path": "."}', "other"))
    timeline(finished("e", "ok", "list_dir", '{"path": "."}', "other"))
    timeline(finished("f", "ok", "list_dir", '{"path": "."}', "other"))
    assert [e.count for e in timeline.entries] == [19, 1, 1, 1]


def test_messages_stream_then_are_whole() -> None:
    timeline = Timeline()
    for piece in ("Hel", "lo"):
        timeline(TextDelta(piece))
    (message,) = timeline.entries
    assert message.message == "Hello" and message.busy
    timeline(MessageDone("Hello."))
    assert message.message == "Hello." and not message.busy and message.title() == "message: Hello."


def test_an_approval_waits_until_decided_and_says_so() -> None:
    timeline = Timeline()
    assert timeline.waiting_since() is None
    first = timeline.ask(ToolCall("a", "run_python", "{}"), at=10.0)
    second = timeline.ask(ToolCall("b", "add_cell", "{}"), at=12.0)
    assert timeline.waiting_since() == 10.0 and first.busy
    assert first.title() == f"approval: run_python · {WAITING}"
    timeline.decide(first, "approved")
    assert timeline.waiting_since() == 12.0 and first.title() == "approval: run_python · approved"
    timeline.decide(second, "denied")
    assert timeline.waiting_since() is None and not second.busy


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "not_run", "denied", "error"]), st.integers(0, 2)), max_size=400))
def test_every_call_is_counted_once_in_order_and_the_kept_entries_are_bounded(calls) -> None:
    timeline = Timeline()
    for i, (status, output) in enumerate(calls):
        timeline(finished(f"c{i}", status, output=str(output)))
    entries = timeline.entries
    assert len(entries) <= HEAD_ENTRIES + TAIL_ENTRIES
    assert len(timeline.head) <= HEAD_ENTRIES and len(timeline.tail) <= TAIL_ENTRIES
    order = [int(e.call.call_id[1:]) for e in entries if e.call is not None]
    assert order == sorted(order)  # in the order they came
    if not timeline.omitted:
        assert sum(e.count for e in entries) == len(calls)  # merged calls are counted, none lost
    else:
        assert len(entries) == HEAD_ENTRIES + TAIL_ENTRIES  # only a full timeline leaves entries out
    assert timeline.denied == sum(status == "denied" for status, _ in calls)
    for before, after in zip(entries, entries[1:], strict=False):  # merging is complete
        assert not (after.result and before.result and after.result.status == "not_run"
                    and (before.result.output, before.result.status) == (after.result.output, "not_run"))


def test_a_long_run_keeps_its_head_and_tail_and_forgets_the_calls_between() -> None:
    timeline = Timeline()
    for i in range(1000):
        timeline(ToolCallStarted(ToolCall(f"c{i}", "look", "{}")))
        timeline(finished(f"c{i}", output=str(i)))
    assert timeline.omitted == 1000 - HEAD_ENTRIES - TAIL_ENTRIES
    assert len(timeline.calls) == HEAD_ENTRIES + TAIL_ENTRIES  # the lookup holds only what is kept
    assert timeline.entries[HEAD_ENTRIES].call.call_id == f"c{1000 - TAIL_ENTRIES}"  # type: ignore[union-attr]


@tool
def plot(n: int) -> object:
    """Draw."""
    from agentkernel.tools import ToolOutput

    return ToolOutput("drew", displays=[Display({"image/webp": "AAAA", "text/plain": "fig"}),
                                        Display({"text/html": "<b>table</b>"})])


def test_a_real_run_gives_its_calls_and_their_images() -> None:
    timeline = Timeline()
    result = run_sync("go", model=ScriptedModel([[Call("plot", {"n": 1}), Call("plot", {"n": 2})], "done"]),
                      tools=[plot], on_event=timeline, limits=Limits(max_tool_calls=1))
    call, refused = timeline.entries  # the budget ends the run before the model answers
    assert [d.data["text/plain"] for d in call.images] == ["fig"]  # webp is an image; the HTML table is not
    assert refused.result is not None and refused.result.status == "not_run" and not refused.images
    assert result.status == "hit_tool_call_cap"
