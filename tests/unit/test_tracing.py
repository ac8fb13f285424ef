"""OpenTelemetry GenAI spans (agentkernel/tracing.py), read back from the SDK's in-memory exporter: one tree per
run, the attributes of each span, the run's span events, no content unless asked, and no secret even then."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from runtime_helpers import run_sync  # noqa: E402

from agentkernel import Call, GuardConfig, ScriptedModel, StopSignal, Turn, run, tool  # noqa: E402
from agentkernel.listeners.tracing import RunSpans, SessionSpans, wanted  # noqa: E402
from agentkernel.mcp.session import ServedSession  # noqa: E402
from agentkernel.secrets import KERNEL, marker  # noqa: E402

SECRET = "tr4ce-" + "K9x" * 10


@tool
async def lookup(key: str) -> str:
    """Look a key up (a long output, so the window fills), taking a moment (so parallel calls overlap)."""
    await asyncio.sleep(0.01)
    return f"value of {key}: " + "z" * 1500


@tool(read_only=False)
def write(n: int) -> str:
    """Write something (denied in these tests)."""
    return f"wrote {n}"


@tool
async def leak() -> str:
    """Return the secret (which the runner redacts)."""
    return f"the token is {SECRET}"


def _spans(content: bool = False, **options: Any) -> tuple[list[ReadableSpan], Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = options.pop("model")
    result = run_sync("look things up", model=model, on_event=[RunSpans(model, provider=provider, content=content)],
                      **options)
    return list(exporter.get_finished_spans()), result


def _busy_run(content: bool = False) -> tuple[list[ReadableSpan], Any]:
    """Parallel calls, a denial, a compaction and a guard trip, in one run."""
    script = [
        Turn(text="two at once", calls=[Call("lookup", {"key": "a"}), Call("lookup", {"key": "b"})]),
        Call("write", {"n": 1}),
        Call("lookup", {"key": "c"}),
        Call("lookup", {"key": "d"}),
        Call("lookup", {"key": "d"}),
        "never reached",
    ]
    return _spans(content, model=ScriptedModel(script), tools=[lookup, write], approve=lambda call, t: False,
                  context_window=2500, guards=GuardConfig(repeat_limit=2))


def test_one_tree_per_run_with_a_span_per_request_and_per_call() -> None:
    spans, result = _busy_run()
    assert result.status == "repeated_tool_call" and result.compactions >= 1 and result.denied_calls == 1
    (run,) = [s for s in spans if s.name == "invoke_agent agentkernel"]
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}  # one trace
    assert run.parent is None
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in spans if s is not run)
    chats = [s for s in spans if s.attributes["gen_ai.operation.name"] == "chat"]
    tools = [s for s in spans if s.attributes["gen_ai.operation.name"] == "execute_tool"]
    turns = [s for s in chats if "agentkernel.request.purpose" not in s.attributes]  # (summaries say so)
    assert len(turns) == result.rounds and len(chats) >= len(turns)  # (and a summary request, if compaction asked)
    assert len(tools) == 6  # a, b (in parallel), write (denied), c, d, d
    a, b = tools[0], tools[1]
    assert a.start_time < b.end_time and b.start_time < a.end_time  # they overlapped
    assert run.attributes["gen_ai.agent.id"] == result.run_id == run.attributes["gen_ai.conversation.id"]
    assert run.attributes["agentkernel.status"] == "repeated_tool_call"
    assert run.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    names = [e.name for e in run.events]
    assert "agentkernel.compaction" in names and "agentkernel.guard" in names


def test_chat_spans_hold_usage_finish_reason_and_the_model() -> None:
    spans, result = _busy_run()
    turns = [s for s in spans if s.name.startswith("chat ") and "agentkernel.request.purpose" not in s.attributes]
    first = turns[0].attributes
    assert first["gen_ai.request.model"] == "scripted" and first["gen_ai.provider.name"]
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["gen_ai.usage.output_tokens"] > 0 and first["gen_ai.usage.input_tokens"] >= 0
    assert "agentkernel.usage.estimated" not in first  # counted by the model, not estimated (said only when so)
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in spans if s.name.startswith("chat ")) == (
        result.usage.output_tokens)


def test_tool_spans_say_denial_and_why() -> None:
    spans, _ = _busy_run()
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool ")}
    (denied,) = [s for s in tools.values() if s.attributes["gen_ai.tool.name"] == "write"]
    assert denied.attributes["agentkernel.tool.denied"] is True
    assert denied.attributes["agentkernel.tool.denial_reason"].startswith("denied")
    ok = [s for s in tools.values() if s.attributes["gen_ai.tool.name"] == "lookup"]
    assert all(s.attributes["agentkernel.tool.status"] == "ok" and s.attributes["gen_ai.tool.type"] == "function"
               for s in ok)
    assert all(s.end_time >= s.start_time for s in tools.values())  # the span's length is the call's duration
    assert all(s.end_time - s.start_time >= 10_000_000 for s in ok)  # (lookup sleeps 10 ms)


def test_stop_is_a_span_event_and_the_cut_call_says_so() -> None:
    stop = StopSignal()

    @tool
    async def slow() -> str:
        """Take long."""
        threading.Timer(0.05, stop.set).start()
        await asyncio.sleep(10)
        return "late"

    spans, result = _spans(model=ScriptedModel([Call("slow"), "done"]), tools=[slow], stop=stop)
    assert result.status == "aborted"
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert [e.name for e in run.events] == ["agentkernel.stop"]
    (cut,) = [s for s in spans if s.name == "execute_tool slow"]
    assert cut.attributes["agentkernel.tool.cut"] is True


def test_an_interrupt_is_a_span_event_and_ends_the_open_call_and_the_run() -> None:
    """The kernel's interrupt cancels the cell's task from outside: the run's span still ends, says so, and the call
    it cut ends with it (a trace never keeps an open span)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    started = threading.Event()  # (the tool runs in the loop's thread: set from there, awaited here)

    @tool
    async def slow() -> str:
        """Take long."""
        started.set()
        await asyncio.sleep(10)
        return "late"

    async def interrupted() -> None:
        model = ScriptedModel([Call("slow"), "done"])
        task = asyncio.ensure_future(run("go", model=model, tools=[slow], on_event=RunSpans(model, provider=provider)))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    spans = exporter.get_finished_spans()
    (run_span,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert [e.name for e in run_span.events] == ["agentkernel.interrupt"]
    assert run_span.attributes["agentkernel.status"] == "aborted"
    (cut,) = [s for s in spans if s.name == "execute_tool slow"]
    assert cut.parent.span_id == run_span.context.span_id and cut.end_time >= cut.start_time


CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def _all_values(spans: list[ReadableSpan]) -> str:
    return json.dumps([[dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]] for s in spans],
                      default=str)


def test_no_content_without_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel([Call("lookup", {"key": "secretive"}), "the answer is tangerine"])
    run_sync("what is the key?", model=model, tools=[lookup], on_event=RunSpans(model, provider=provider))
    spans = exporter.get_finished_spans()
    assert not any(key in (s.attributes or {}) for s in spans for key in CONTENT_KEYS)
    text = _all_values(list(spans))
    assert "secretive" not in text and "tangerine" not in text and "what is the key" not in text


def test_content_with_the_switch_holds_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    KERNEL.add(SECRET, name="TRACE_TOKEN")
    try:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        model = ScriptedModel([Call("leak", {}), Call("lookup", {"key": SECRET}), f"it was {SECRET}"])
        run_sync(f"find {SECRET}", model=model, tools=[leak, lookup], system=f"system {SECRET}",
                 on_event=RunSpans(model, provider=provider))
        spans = list(exporter.get_finished_spans())
    finally:
        KERNEL.clear()
    text = _all_values(spans)
    assert SECRET not in text and marker("TRACE_TOKEN") in text
    assert all(any(key in (s.attributes or {}) for s in spans) for key in CONTENT_KEYS if key != "gen_ai.output"
               ".messages") and any("gen_ai.output.messages" in (s.attributes or {}) for s in spans)


def test_with_content_each_request_span_holds_its_response_the_message_and_the_calls() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel([Turn(text="looking", calls=[Call("lookup", {"key": "a"}), Call("lookup", {"key": "b"})]),
                           "the answer"])
    run_sync("look", model=model, tools=[lookup], on_event=RunSpans(model, provider=provider, content=True))
    spans = exporter.get_finished_spans()
    first, last = sorted((s for s in spans if s.name == "chat scripted"), key=lambda s: s.start_time)
    (said,) = json.loads(first.attributes["gen_ai.output.messages"])
    assert said["role"] == "assistant" and said["finish_reason"] == "tool_calls"
    assert [p["type"] for p in said["parts"]] == ["text", "tool_call", "tool_call"]
    assert said["parts"][0]["content"] == "looking"
    assert [(p["name"], json.loads(p["arguments"])) for p in said["parts"][1:]] == [("lookup", {"key": "a"}),
                                                                                   ("lookup", {"key": "b"})]
    assert json.loads(last.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "the answer"}], "finish_reason": "stop"}]
    calls = [s for s in spans if s.name == "execute_tool lookup"]
    assert {p["id"] for p in said["parts"][1:]} == {s.attributes["gen_ai.tool.call.id"] for s in calls}
    assert first.end_time <= min(s.start_time for s in calls)  # it ended when the response did, not when told


def test_tracing_is_off_until_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
                 "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not wanted() and wanted(True)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert wanted()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not wanted()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not wanted()


def test_a_provider_the_user_set_is_added_to_never_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # as trace.set_tracer_provider(provider) does, once
    assert wanted()
    model = ScriptedModel(["hi"])
    run_sync("hello", model=model, on_event=RunSpans(model))
    assert trace.get_tracer_provider() is provider
    assert [s.name for s in exporter.get_finished_spans()] == ["chat scripted", "invoke_agent agentkernel"]


def test_a_served_session_is_a_tree_of_its_own_with_a_span_per_call() -> None:
    """Under a span of the user's, and beside a run, a session's spans are one trace of their own: its calls (one
    ok, one denied, one leaking the secret, one cut by Stop) under the session's span, content redacted."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    @tool
    async def slow() -> str:
        """Take long (Stop cuts it)."""
        await asyncio.sleep(10)
        return "late"

    async def serve() -> ServedSession:
        with provider.get_tracer("user").start_as_current_span("the user's cell"):
            session = ServedSession([lookup, write, leak, slow], lambda call, t: False)
            session.listeners.append(SessionSpans(session.session_id, ["lookup", "write", "leak", "slow"],
                                                  provider=provider, content=True))
            session.start()
            await session.call("lookup", json.dumps({"key": SECRET}))
            await session.call("write", '{"n": 1}')
            await session.call("leak", "{}")
            asyncio.get_running_loop().call_later(0.05, session.stop.set)
            await session.call("slow", "{}")
            session.close()
        return session

    KERNEL.add(SECRET, name="TRACE_TOKEN")
    try:
        session = asyncio.run(serve())
    finally:
        KERNEL.clear()
    spans = [s for s in exporter.get_finished_spans() if s.name != "the user's cell"]
    (root,) = [s for s in spans if s.name == "agentkernel.serve"]
    assert root.parent is None and root.kind == trace.SpanKind.SERVER  # not under the user's span: a tree of its own
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    calls = [s for s in spans if s is not root]
    assert [s.name for s in calls] == ["execute_tool lookup", "execute_tool write", "execute_tool leak",
                                       "execute_tool slow"]
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in calls)
    assert [s.attributes["agentkernel.tool.status"] for s in calls] == [c.status for c in session.calls]
    assert calls[1].attributes["agentkernel.tool.denied"] is True and calls[3].attributes["agentkernel.tool.cut"]
    assert root.attributes["gen_ai.conversation.id"] == session.session_id
    assert root.attributes["agentkernel.status"] == "aborted" and root.attributes["agentkernel.tool_calls"] == 4
    assert [e.name for e in root.events] == ["agentkernel.stop"]
    text = _all_values(spans)
    assert SECRET not in text and marker("TRACE_TOKEN") in text
