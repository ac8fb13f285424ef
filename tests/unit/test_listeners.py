"""One road out of the loop (agentkernel/events.py): every event leaves through the loop's Listeners, redacted on the
way, and the transcript is one listener among the others, so no listener, present or future, can hear a secret."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import string
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import run_sync

from agentkernel import Call, ScriptedModel, StopSignal, Turn, load_transcript, tool
from agentkernel.events import (
    Event,
    ItemCommitted,
    Listeners,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
    redacted,
)
from agentkernel.listeners.transcript import Transcript
from agentkernel.loop import AgentLoop
from agentkernel.secrets import KERNEL, SecretSet, marker

# Letters and digits only: a value the redaction can find whatever text or JSON it sits in.
SECRETS = st.text(string.ascii_letters + string.digits, min_size=16, max_size=120)


@pytest.fixture(autouse=True)
def _forget_added_secrets():
    yield
    KERNEL.clear()


def _script(secret: str) -> list[Any]:
    """A model that writes the secret everywhere a model can: text, a call's arguments, its final answer."""
    return [
        Turn(text=f"the key is {secret}", calls=[Call("echo", {"text": secret})]),
        Turn(calls=[Call("echo", {"text": "again " + secret}), Call("echo", {"text": "once more"})]),
        f"done: {secret}",
    ]


@tool
def echo(text: str) -> str:
    """Say it back (a tool's output is redacted by the runner)."""
    return f"you said {text}"


def _everything(event: Event) -> str:
    """All an event holds, as text (dataclasses all the way down)."""
    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value
    return json.dumps(plain(event), default=str, ensure_ascii=False)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=SECRETS)
def test_no_listener_hears_a_secret_whatever_wrote_it(secret: str, tmp_path: Path) -> None:
    KERNEL.clear()
    shown = marker("planted")
    KERNEL.add(secret, name="planted")
    first, second = [], []
    path = tmp_path / f"{abs(hash(secret))}.jsonl"
    history = [{"type": "message", "role": "user", "content": f"earlier, {secret}"}]
    result = run_sync(f"use {secret}", model=ScriptedModel(_script(secret)), tools=[echo], on_event=[first.append,
                      second.append], transcript=path, system=f"system {secret}", history=history)
    assert result.status == "complete"
    assert first == second and len(first) > 20
    kinds = {type(e) for e in first}
    assert {RunStarted, ItemCommitted, ToolCallStarted, RunFinished} <= kinds
    for event in first:
        text = _everything(event)
        assert secret not in text, f"{type(event).__name__} holds the secret"
    assert shown in _everything(first[-1])  # the answer, redacted: the marker stands where the value was
    transcript = path.read_text()
    assert secret not in transcript and shown in transcript
    # The transcript heard what the others heard: the history it reads back is the one the listeners were told.
    told = next(e for e in first if isinstance(e, RunStarted)).history + [
        e.item for e in first if isinstance(e, ItemCommitted)]
    assert load_transcript(path) == told


def test_an_event_without_a_secret_passes_as_it_is() -> None:
    events: list[Event] = []
    run_sync("go", model=ScriptedModel([Call("echo", {"text": "hi"}), "done"]), tools=[echo], on_event=events.append)
    secrets = SecretSet((("planted", "x" * 40),))
    assert all(redacted(event, secrets) is event for event in events)


def test_every_kind_of_event_with_text_is_redacted() -> None:
    """Raw events (the secret unknown to the run, so its tool outputs are not redacted either) redacted afterwards:
    nothing holds the secret but a tool's output, which the runner redacts where it makes it and which passes as it
    is. An event type added later with a text field fails here until :func:`redacted` handles it."""
    secret = "s3cr3t" + "q" * 30
    secrets = SecretSet((("planted", secret),))
    events: list[Event] = []
    model = ScriptedModel([Turn(text=f"say {secret}", calls=[Call("echo", {"text": secret})]), f"end {secret}"],
                          delay=0.001)
    run_sync(f"go {secret}", model=model, tools=[echo], on_event=events.append, system=secret,
             history=[{"type": "message", "role": "user", "content": secret}])
    assert {type(e) for e in events} <= set(get_args(Event))
    assert sum(secret in _everything(e) for e in events) > 10  # the model and the user wrote it all over
    for event in events:
        clean = redacted(event, secrets)
        if isinstance(event, ToolCallFinished):  # the runner's output passes as it is; the model's arguments do not
            assert clean.result.output == event.result.output and secret not in _everything(clean.result.call)
        elif isinstance(event, ItemCommitted) and event.item["type"] == "function_call_output":
            assert clean is event
        elif isinstance(event, RunFinished):  # so do the findings' outputs; the rest is the model's and the user's
            findings = [{**f, "output": ""} for f in clean.result.partial_findings]
            history = [i for i in clean.result.history if i["type"] != "function_call_output"]
            assert secret not in _everything(dataclasses.replace(clean, result=dataclasses.replace(
                clean.result, partial_findings=findings, history=history)))
        else:
            assert secret not in _everything(clean), type(event).__name__


def test_a_listener_list_a_single_listener_and_none_all_work() -> None:
    for on_event in (None, [], print, [print], Listeners([print])):
        loop = AgentLoop(ScriptedModel(["hi"]), on_event=on_event)
        assert all(callable(listener) and not isinstance(listener, Listeners) for listener in loop.listeners)


def test_the_transcript_is_one_listener_among_the_others(tmp_path: Path) -> None:
    loop = AgentLoop(ScriptedModel(["hi"]), on_event=[print], transcript=tmp_path / "t.jsonl")
    assert [type(x) for x in loop.listeners] == [type(print), Transcript]


def test_a_tool_that_swallows_stop_does_not_let_the_round_go_on() -> None:
    """Stop cancels the run's task where it waits; a tool that swallows that cancellation and returns keeps its
    output, and no further call of the run starts."""
    stop = StopSignal()
    started: list[str] = []

    @tool
    async def stubborn(n: int) -> str:
        """Wait, ignoring a cancellation."""
        started.append(f"stubborn {n}")
        if n == 1:
            stop.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return "swallowed"
        return "ran"

    result = run_sync("go", model=ScriptedModel([Call("stubborn", {"n": 1}), Call("stubborn", {"n": 2}), "done"]),
                      tools=[stubborn], stop=stop)
    assert result.status == "aborted"
    assert started == ["stubborn 1"]
    assert result.history[-1]["output"] == "swallowed"


def test_a_cancellation_from_outside_still_propagates() -> None:
    @tool
    async def wait() -> str:
        """Wait long."""
        await asyncio.sleep(30)
        return "never"

    async def main() -> AgentLoop:
        loop = AgentLoop(ScriptedModel([Call("wait"), "done"]), tools=[wait], limits=None)
        task = asyncio.ensure_future(loop.run("go"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop

    loop = asyncio.run(main())
    assert loop.result is not None and loop.result.status == "aborted"
