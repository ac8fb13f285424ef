"""The call/output invariant: validation, repair, the JSONL transcript, and resuming a stopped run."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import calls, outputs, run_sync

from agentkernel import (
    Call,
    Limits,
    ScriptedModel,
    Turn,
    load_transcript,
    repair_history,
    run,
    tool,
    validate_history,
)
from agentkernel.record.history import (
    MISSING_OUTPUT,
    HistoryError,
    assistant_message,
    function_call,
    function_call_output,
    history_problems,
    user_message,
)


def call(cid: str, name: str = "read_file") -> dict:
    return function_call(cid, name, '{"path": "a"}')


def out(cid: str, text: str = "ok") -> dict:
    return function_call_output(cid, text)


GOOD = [user_message("hi"), call("1"), call("2"), out("2"), out("1"), assistant_message("done")]


def test_a_good_history_validates_and_repair_leaves_it_equal():
    validate_history(GOOD)
    assert history_problems(GOOD) == []
    repaired = repair_history(GOOD)
    assert repaired == GOOD
    assert repaired is not GOOD and repaired[1] is not GOOD[1]  # a copy: the caller's items are left alone


BROKEN = {
    "missing output": (
        [user_message("hi"), call("1"), call("2"), out("1"), assistant_message("x")],
        "function_call '2' has no output",
        [user_message("hi"), call("1"), call("2"), out("1"),
         function_call_output("2", MISSING_OUTPUT, synthetic=True), assistant_message("x")],
    ),
    "missing output at the end": (
        [user_message("hi"), call("1")],
        "function_call '1' has no output",
        [user_message("hi"), call("1"), function_call_output("1", MISSING_OUTPUT, synthetic=True)],
    ),
    "orphan output": (
        [user_message("hi"), out("9"), call("1"), out("1")],
        "output for call_id '9' has no function_call before it",
        [user_message("hi"), call("1"), out("1")],
    ),
    "duplicate output": (
        [call("1"), out("1", "first"), out("1", "second")],
        "second output for call_id '1'",
        [call("1"), out("1", "first")],
    ),
    "output before call": (
        [user_message("hi"), out("1"), call("1"), assistant_message("x")],
        "output for call_id '1' has no function_call before it",
        [user_message("hi"), call("1"), function_call_output("1", MISSING_OUTPUT, synthetic=True),
         assistant_message("x")],
    ),
    "duplicate call ids": (
        [call("1"), out("1", "a"), call("1"), out("1", "b"), assistant_message("x")],
        "call_id '1' is used by more than one function_call",
        [call("1"), out("1", "a"), assistant_message("x")],
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_validate_and_repair_broken_histories(case):
    history, problem, expected = BROKEN[case]
    with pytest.raises(HistoryError, match=problem):
        validate_history(history)
    repaired = repair_history(history)
    assert repaired == expected
    validate_history(repaired)
    assert repair_history(repaired) == repaired  # repair is idempotent


def test_every_problem_is_named():
    history = [out("0"), call("1"), call("2"), out("2"), out("2")]
    problems = history_problems(history)
    assert len(problems) == 3
    assert any("'0'" in p for p in problems) and any("'1'" in p for p in problems)


# -- transcript -----------------------------------------------------------------------------------------------


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_transcript_is_written_item_by_item_and_flushed(tmp_path):
    path = tmp_path / "run.jsonl"
    seen_during_tool: list[dict] = []

    @tool
    async def slow_read(path: str) -> str:
        """Pause in the middle of the run and look at the transcript as another process would."""
        seen_during_tool.extend(read_lines(transcript))
        await asyncio.sleep(0.01)
        return "contents"

    transcript = path
    script = [Turn(text="Reading.", calls=[Call("slow_read", {"path": "a"}, call_id="c1")]), "Done."]
    result = run_sync("read a", model=ScriptedModel(script), tools=[slow_read], transcript=path)

    # While the tool ran, everything committed so far was already on disk (and not the finish line): the items, and
    # the usage of the response that asked for the call.
    assert [r["event"] for r in seen_during_tool] == ["start", "item", "usage", "item", "item"]
    assert [r["item"]["type"] for r in seen_during_tool if r["event"] == "item"] == ["message", "message",
                                                                                     "function_call"]
    assert seen_during_tool[0]["run_id"] == result.run_id

    records = read_lines(path)
    finish = records[-1]
    assert records[0]["event"] == "start" and (finish["event"], finish["status"], finish["detail"]) == (
        "finish", "complete", "")
    assert finish["usage"]["output_tokens"] == result.usage.output_tokens
    assert [r["item"] for r in records[1:-1] if r["event"] == "item"] == result.history
    assert [r["event"] for r in records].count("usage") == 2
    assert result.transcript == str(path)
    assert load_transcript(path) == result.history


def test_no_transcript_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTKERNEL_TRANSCRIPTS", str(tmp_path / "transcripts"))
    result = asyncio.run(run("hi", model=ScriptedModel(["hello"])))
    assert result.transcript is None and not (tmp_path / "transcripts").exists()


def test_transcript_true_writes_to_the_configured_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTKERNEL_TRANSCRIPTS", str(tmp_path / "transcripts"))
    result = asyncio.run(run("hi", model=ScriptedModel(["hello"]), transcript=True))
    assert result.transcript is not None and result.transcript.startswith(str(tmp_path / "transcripts"))
    assert result.run_id in result.transcript
    assert load_transcript(result.transcript) == result.history


def test_load_transcript_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "torn.jsonl"
    result = run_sync("hi", model=ScriptedModel([Call("read_file", {"path": "a"}), "bye"]), transcript=path)
    lines = path.read_text().splitlines()
    # The kernel died while writing the final answer: the finish line is gone and the last item is torn.
    torn = lines[:-2] + [lines[-2][: len(lines[-2]) // 2]]
    path.write_text("\n".join(torn))
    loaded = load_transcript(path)
    assert loaded == result.history[:-1]
    validate_history(loaded)


@pytest.mark.parametrize("torn", ['{"event": "item", "item": {"type": "mess', "12", '"abc"', "[1, 2", "null"])
def test_load_transcript_survives_any_torn_line(tmp_path, torn):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"event": "item", "item": user_message("hi")}) + "\n" + torn)
    assert load_transcript(path) == [user_message("hi")]


def test_load_transcript_of_a_run_killed_mid_tool_is_repaired(tmp_path):
    path = tmp_path / "killed.jsonl"
    lines = [{"event": "start", "run_id": "x"}, {"event": "item", "item": user_message("hi")},
             {"event": "item", "item": call("1")}, {"event": "item", "item": call("2")},
             {"event": "item", "item": out("1")}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    loaded = load_transcript(path)
    assert loaded[-1] == function_call_output("2", MISSING_OUTPUT, synthetic=True)
    validate_history(loaded)


def test_a_transcript_file_reused_by_a_resumed_run_loads_as_one_history(tmp_path):
    path = tmp_path / "session.jsonl"
    first = run_sync("one", model=ScriptedModel(["first answer"]), transcript=path)
    second = run_sync("two", model=ScriptedModel(["second answer"]), history=first.history, transcript=path)
    assert load_transcript(path) == second.history
    assert [i["content"] for i in second.history] == ["one", "first answer", "two", "second answer"]


# -- resuming -------------------------------------------------------------------------------------------------


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


def test_resume_a_stopped_run_from_its_history():
    first = run_sync(
        "read a and b",
        model=ScriptedModel([Call("read_file", {"path": "a"}), Call("read_file", {"path": "b"}), "never"]),
        tools=[read_file],
        limits=Limits(max_iterations=1),
    )
    assert first.status == "hit_iteration_cap"

    seen: list[list[dict]] = []

    def script(request):
        seen.append(list(request.history))
        return [Call("read_file", {"path": "b"})] if len(seen) == 1 else "a and b read"

    second = run_sync("go on", model=ScriptedModel(script), tools=[read_file], history=first.history)
    assert second.status == "complete"
    assert seen[0][: len(first.history)] == first.history  # the model sees the whole earlier run
    assert seen[0][-1] == user_message("go on")
    assert [o["output"] for o in outputs(second.history)] == ["contents of a", "contents of b"]
    validate_history(second.history)
    # Call ids stay unique across the two runs, so each output still matches exactly one call.
    ids = [c["call_id"] for c in calls(second.history)]
    assert len(ids) == len(set(ids)) == 2


def test_resume_from_a_broken_history_repairs_it_first():
    broken = [user_message("hi"), call("1"), out("9")]
    result = run_sync("again", model=ScriptedModel(["fine"]), history=broken)
    assert result.status == "complete"
    assert result.history[:3] == [user_message("hi"), call("1"),
                                  function_call_output("1", MISSING_OUTPUT, synthetic=True)]
    validate_history(result.history)
    assert broken == [user_message("hi"), call("1"), out("9")]  # the caller's list is untouched


def test_resume_from_a_transcript(tmp_path):
    path = tmp_path / "t.jsonl"
    run_sync("hi", model=ScriptedModel([Call("read_file", {"path": "a"}), Turn(error="connection reset")]),
             tools=[read_file], transcript=path)
    history = load_transcript(path)
    result = run_sync("continue", model=ScriptedModel(["resumed"]), history=history)
    assert result.status == "complete"
    assert outputs(result.history)[0]["output"] == "contents of a"


def test_load_transcript_survives_a_line_torn_mid_character(tmp_path):
    path = tmp_path / "t.jsonl"
    good = json.dumps({"event": "item", "item": user_message("héllo")}, ensure_ascii=False) + "\n"
    torn = json.dumps({"event": "item", "item": user_message("日本")}, ensure_ascii=False).encode()[:-5]
    path.write_bytes(good.encode() + torn)
    assert load_transcript(path) == [user_message("héllo")]


def test_a_run_appending_after_a_torn_line_starts_on_a_fresh_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"event": "item", "item": {"type": "mess')
    result = run_sync("hi", model=ScriptedModel(["hello"]), transcript=path)
    assert load_transcript(path) == result.history == [user_message("hi"), assistant_message("hello")]


def test_a_model_that_reuses_call_ids_still_leaves_every_call_answered():
    script = [
        [Call("read_file", {"path": "a"}, call_id="dup"), Call("read_file", {"path": "b"}, call_id="dup")],
        [Call("read_file", {"path": "c"}, call_id="dup"), Call("read_file", {"path": "d"}, call_id="")],
        "done",
    ]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "complete"
    validate_history(result.history)
    ids = [c["call_id"] for c in calls(result.history)]
    assert len(set(ids)) == 4 and all(ids)
    assert [o["output"] for o in outputs(result.history)] == [f"contents of {p}" for p in "abcd"]
    assert [o["call_id"] for o in outputs(result.history)] == ids


items = st.one_of(
    st.builds(call, st.sampled_from("abcd")),
    st.builds(out, st.sampled_from("abcde")),
    st.builds(assistant_message, st.just("text")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(items, max_size=12))
def test_repair_makes_any_history_valid_and_keeps_what_was_valid(history):
    repaired = repair_history(history)
    validate_history(repaired)
    assert repair_history(repaired) == repaired
    # Nothing is invented except synthetic outputs, and messages and first calls all survive in order.
    assert [i for i in repaired if not i.get("synthetic")] == [
        i for i in repaired if i in history and not i.get("synthetic")
    ]
    assert [i for i in repaired if i["type"] == "message"] == [i for i in history if i["type"] == "message"]
    first_calls = list({i["call_id"]: i for i in reversed(history) if i["type"] == "function_call"}.values())
    assert sorted(c["call_id"] for c in calls(repaired)) == sorted(c["call_id"] for c in first_calls)
    if not history_problems(history):
        assert repaired == history
