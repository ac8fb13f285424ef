"""Fault injection for what a run keeps: text that UTF-8 cannot encode, transcripts that cannot be
written or were cut, and resuming from a transcript file.

Each test is a case that broke the run before. What must hold: the run ends as it would have, every call has its
output, the history and every event can be encoded, written and shown, and a transcript loads back to the same
history, repaired if it has to be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kernel_client import KernelSession, kernel_env
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_events, lookup_tool
from runtime_helpers import outputs

from agentkernel import (
    Call,
    RecordingModel,
    ReplayModel,
    ScriptedModel,
    Turn,
    load_transcript,
    run,
    tool,
    validate_history,
)
from agentkernel.events import Event, MessageDone, TextDelta, ToolCallFinished, ToolCallStarted
from agentkernel.jupyter.render import render_html, render_text
from agentkernel.listeners.timeline import Timeline
from agentkernel.models import OpenAIChatModel
from agentkernel.record.history import MISSING_OUTPUT

LONE = "\ud800"
"""A lone surrogate: a str can hold it, UTF-8 cannot encode it."""
REPLACED = "\ufffd"


@tool
def odd_output() -> str:
    """Return text holding a lone surrogate."""
    return f"x{LONE}y"


@tool
def plain_output() -> str:
    """Return plain text."""
    return "fine"


def encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def event_texts(events: list[Event]) -> list[str]:
    texts: list[str] = []
    for event in events:
        if isinstance(event, TextDelta | MessageDone):
            texts.append(event.text)
        elif isinstance(event, ToolCallStarted):
            texts += [event.call.name, event.call.arguments]
        elif isinstance(event, ToolCallFinished):
            texts += [event.result.name, event.result.arguments, event.result.output]
    return texts


# -- #3: lone surrogates -------------------------------------------------------------------------------------


def test_lone_surrogates_anywhere_leave_the_run_its_invariant_and_its_transcript_whole(tmp_path: Path) -> None:
    model = ScriptedModel([
        Turn(text=f"he{LONE}llo", calls=[Call("odd_output"), Call("plain_output"), Call(f"no{LONE}such")]),
        f"done{LONE}",
    ])
    events: list[Event] = []
    record = Timeline()

    def listen(event: Event) -> None:
        events.append(event)
        record(event)

    path = tmp_path / "run.jsonl"
    result = asyncio.run(run(f"prompt{LONE}", model=model, tools=[odd_output, plain_output],
                             system=f"system{LONE}", transcript=path, on_event=listen))
    assert result.status == "complete", result.summary
    validate_history(result.history)
    assert [o["output"] for o in outputs(result.history)][:2] == [f"x{REPLACED}y", "fine"]  # both calls answered
    assert result.history[0]["content"] == f"prompt{REPLACED}"
    assert result.answer == f"done{REPLACED}"
    assert encodable(result.history) and encodable(result.partial_findings)
    assert all(encodable(text) for text in event_texts(events))
    render_html(result, record).encode("utf-8")
    render_text(result, record).encode("utf-8")
    # The transcript is valid UTF-8 and loads back to the same history.
    path.read_bytes().decode("utf-8")
    assert load_transcript(path) == result.history


def test_an_api_that_sends_lone_surrogates_through_the_real_sdk(tmp_path: Path) -> None:
    calls = [("call_a", "lookup", ['{"word": "ca', '\\ud800t"}']), ("call_b", "lookup", ['{"word": "dog"}'])]
    with ScriptedServer(Reply(chat_events(["he", LONE, "llo"], calls)), Reply(chat_events(["ok"]))) as server:
        model = OpenAIChatModel("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run("define", model=model, tools=[lookup_tool()], transcript=tmp_path / "run.jsonl"))
    assert result.status == "complete", result.summary
    validate_history(result.history)
    assert [o["call_id"] for o in outputs(result.history)] == ["call_a", "call_b"]
    # What went back to the API is valid Unicode: the surrogates were replaced before the history kept them.
    sent = server.requests[1].body["messages"]
    assert sent[2]["content"] == f"he{REPLACED}llo"
    # The arguments are JSON text holding a "\\ud800" escape (valid text, passed on as it came); whether the tool
    # ran on them or refused them, its output went back encodable.
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"word": f"ca{LONE}t"}
    assert encodable(sent[3]["content"]) and sent[4]["content"] == "dog means something"
    assert load_transcript(tmp_path / "run.jsonl") == result.history


def test_a_cassette_records_and_replays_lone_surrogates(tmp_path: Path) -> None:
    cassette = tmp_path / "run.cassette.jsonl"
    script = [Turn(text=f"a{LONE}b", calls=[Call("odd_output")]), f"end{LONE}"]
    recorded = asyncio.run(run("go", model=RecordingModel(ScriptedModel(script), cassette), tools=[odd_output]))
    cassette.read_bytes().decode("utf-8")
    replayed = asyncio.run(run("go", model=ReplayModel(cassette), tools=[odd_output]))
    assert recorded.status == replayed.status == "complete"
    assert replayed.history == recorded.history


# -- transcripts that cannot be written, or were cut ---------------------------------------------------------


def test_a_transcript_that_cannot_be_written_warns_and_the_run_goes_on() -> None:
    full = Path("/dev/full")  # every write fails with ENOSPC, as on a full disk
    if not full.exists():
        pytest.skip("needs /dev/full")
    model = ScriptedModel([[Call("plain_output"), Call("plain_output")], "done"])
    with pytest.warns(RuntimeWarning, match="cannot write the transcript /dev/full: .*No space left"):
        result = asyncio.run(run("go", model=model, tools=[plain_output], transcript=full))
    assert result.status == "complete"
    validate_history(result.history)
    assert len(outputs(result.history)) == 2


def test_a_corrupt_transcript_loads_repaired(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [
        {"event": "start", "run_id": "r1", "system": "s"},
        {"event": "item", "item": {"type": "message", "role": "user", "content": f"hi{LONE}"}},
        {"event": "item", "item": {"type": "function_call", "call_id": ["not", "a", "string"], "name": "x",
                                   "arguments": "{}"}},
        {"event": "item", "item": {"type": "function_call", "call_id": "c1", "name": "plain_output",
                                   "arguments": "{}"}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"event": "item", "item": {"ty')
    history = load_transcript(path)
    validate_history(history)
    assert history == [
        {"type": "message", "role": "user", "content": f"hi{REPLACED}"},
        {"type": "function_call", "call_id": "c1", "name": "plain_output", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": MISSING_OUTPUT, "synthetic": True},
    ]
    result = asyncio.run(run("go on", model=ScriptedModel(["resumed"]), history=history))
    assert result.status == "complete" and result.history[:3] == history


# -- #11: resuming from a transcript file, in real kernels ---------------------------------------------------

KERNEL_SETUP = """\
%load_ext agentkernel
import time
from agentkernel import Call, ScriptedModel, Turn, tool

@tool
def nap(s: float) -> str:
    "Sleep s seconds."
    time.sleep(s)
    return "rested"

@tool
def odd() -> str:
    "Return text holding a lone surrogate."
    return "x\\ud800y"

seen = []
def _resume(req):
    seen.append([item.get("content") or item.get("output") or item.get("name") for item in req.history])
    return "Resumed."

napper = ScriptedModel([Call("nap", {"s": 60}), "never"])
resume = ScriptedModel(_resume)
odd_model = ScriptedModel([Turn(text="he\\ud800llo", calls=[Call("odd"), Call("odd")]), "done\\ud800"])
slow_search = ScriptedModel([Call("search_text", {"pattern": "(a+)+$", "path": "slow.txt"}), "never"])
"""


def _transcript_with_a_call(directory: Path, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in directory.glob("*.jsonl"):
            if '"function_call"' in path.read_text(encoding="utf-8", errors="replace"):
                return path
        time.sleep(0.05)
    raise AssertionError(f"no transcript with a function_call in {directory}")


def test_continue_from_the_transcript_of_a_killed_kernel(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = kernel_env(tmp_path)
    first = KernelSession(cwd, env)
    try:
        first.ok(KERNEL_SETUP)
        first.submit("%%agent -m napper --tools nap\nLook it up.")
        path = _transcript_with_a_call(tmp_path / "transcripts")
        first.km.signal_kernel(signal.SIGKILL)  # as the OOM killer would, mid-tool: a call without its output
    finally:
        with contextlib.suppress(Exception):
            first.shutdown()

    second = KernelSession(cwd, env)
    try:
        second.ok(KERNEL_SETUP)
        second.ok(f"%%agent --continue {path} -m resume\nGo on.")
        history = second.value("_agent.history")
        assert history[:4] == [
            {"type": "message", "role": "user", "content": "Look it up."},
            {"type": "function_call", "call_id": history[1]["call_id"], "name": "nap", "arguments": '{"s": 60}'},
            {"type": "function_call_output", "call_id": history[1]["call_id"], "output": MISSING_OUTPUT,
             "synthetic": True},
            {"type": "message", "role": "user", "content": "Go on."},
        ]
        assert second.value("_agent.answer") == "Resumed."
        # --continue with no file goes on from _agent, as before; a one-line prompt after it stays the prompt.
        second.ok("%agent --continue -m resume And then?")
        assert second.value("seen")[-1][-3:] == ["Go on.", "Resumed.", "And then?"]

        (cwd / "notes.txt").write_text("not a transcript\n")
        for line, message in [("--continue missing.jsonl", "--continue: there is no transcript 'missing.jsonl'"),
                              ("--continue=notes.txt", "--continue: 'notes.txt' holds no history")]:
            cell = second.run(f"%%agent {line} -m resume\nGo on.")
            (error,) = cell.errors
            assert error["ename"] == "AgentConfigError" and message in error["evalue"], cell.describe()

        # #3 in a kernel: lone surrogates in model text and tool outputs are shown and kept, and the run completes.
        cell = second.ok("%%agent -m odd_model --tools odd\nGo.")
        assert second.value("_agent.status") == "complete"
        assert second.value("[o['output'] for o in _agent.history if o['type'] == 'function_call_output']") == [
            f"x{REPLACED}y", f"x{REPLACED}y"]
        assert second.value("_agent.answer") == f"done{REPLACED}"
        (bundle,) = cell.records
        assert f"he{REPLACED}llo" in bundle["text/plain"] and f"x{REPLACED}y" in bundle["text/html"]

        # #2 in a kernel: a catastrophic regex is cut by --max-seconds on time (it froze the kernel for ~10 s).
        (cwd / "slow.txt").write_text("a" * 25 + "b\n")
        cell = second.run("%%agent -m slow_search --max-seconds 1\nFind it.")
        (error,) = cell.errors
        assert error["ename"] == "HitWallClock", cell.describe()
        took = cell.idle_at - cell.sent_at
        print(f"--max-seconds 1 with a catastrophic regex: the cell went idle after {took:.2f} s")
        assert took < 2.5
    finally:
        second.shutdown()
