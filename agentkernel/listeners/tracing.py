"""OpenTelemetry GenAI spans of a run, as one more listener of the loop's events.

A run is an ``invoke_agent`` span; each model request a ``chat`` span and each tool call an ``execute_tool`` span
under it (one trace per run), with the attributes of the OpenTelemetry semantic conventions for generative AI
(:data:`SEMCONV`) and a few of our own (``agentkernel.*``: the cost, estimated usage, a call's status, denial and
cut). Guard trips, budget stops, compactions, Stop and interrupts are span events of the run's span. A
``%agent_serve`` session is a trace of its own (:class:`SessionSpans`).

Off until asked: :func:`wanted` says whether the standard environment (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_TRACES_EXPORTER``), our own switch (``%config AgentMagics.tracing =
True``) or a global ``TracerProvider`` the user set asks for traces. Nothing of OpenTelemetry is imported before
that: this module imports it only inside :func:`tracer_provider` and :class:`RunSpans`.

Content (the prompt, the answer, tool arguments and outputs) goes into spans only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true (or ``content=True``); like everything a listener
hears, it has been redacted by the loop's :class:`~agentkernel.events.Listeners` before it gets here.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import threading
from time import time_ns
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..descriptors import process_log
from ..endings import Trip
from ..events import (
    ContextCompacted,
    Event,
    ItemCommitted,
    RoundStarted,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdated,
)
from ..extras import needs
from ..secrets import KERNEL
from ..text import short

if TYPE_CHECKING:
    from ..tools import ToolCall

SEMCONV = "1.44"
"""The revision of the semantic conventions whose GenAI attributes the spans follow (as
``opentelemetry-semantic-conventions`` 0.66b2 holds them; the GenAI conventions are still marked in development)."""
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
GUARDS = ("repeated_tool_call", "no_progress", "tool_failure", "context_overflow")
BUDGETS = ("hit_iteration_cap", "hit_token_cap", "hit_wall_clock", "hit_tool_call_cap", "hit_cost_cap",
           "gateway_budget")
MAX_CONTENT = 8192
"""Characters of one content attribute (a tool's output can be 50,000)."""

_own: Any = None  # the TracerProvider we made (when the user set none), made once per process
_lock = threading.Lock()


def wanted(option: bool = False) -> bool:
    """Whether traces are asked for: by ``option``, the standard environment, or a global provider the user set
    (looked for only if OpenTelemetry is already imported: with tracing off, this imports nothing)."""
    if option:
        return True
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter and exporter != "none":
        return True
    if exporter != "none" and (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                               or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return True
    return _user_provider() is not None


def content_wanted(option: bool = False) -> bool:
    """Whether message content goes into spans (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``)."""
    return option or os.environ.get(CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")


def _user_provider() -> Any:
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return None if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider) else provider


def tracer_provider() -> Any:
    """The provider spans go to: the global one the user set (we add to it, never replace it), else one of ours
    exporting as the standard environment says (OTLP over HTTP by default, ``console``), made once."""
    global _own
    user = _user_provider()
    if user is not None:
        return user
    with _lock:
        if _own is None:
            with needs("opentelemetry"):
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider = TracerProvider(resource=Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentkernel")}))
            otel = logging.getLogger("opentelemetry")  # (ours to route: the user set no provider of their own)
            otel.addHandler(TROUBLE)
            otel.propagate = False
            names = (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")
            # (a SpanExporter by its methods: it cannot be the SDK's subclass without importing the SDK with this)
            exporters: list[Any] = [_Watched(exporter) for name in names
                                    if (exporter := _exporter(name.strip().lower())) is not None]
            for exporter in exporters:
                provider.add_span_processor(BatchSpanProcessor(exporter))
            atexit.register(_leave, exporters)  # (after the provider's own: runs before it)
            _own = provider
        return _own


class _Watched:
    """An exporter that remembers whether its last export failed."""

    def __init__(self, exporter: Any):
        self.exporter = exporter
        self.failing = False

    def export(self, spans: Any) -> Any:
        result = self.exporter.export(spans)
        self.failing = result.name != "SUCCESS"
        TROUBLE.retrying = False  # (it has given up, or got through)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


def _leave(exporters: list[_Watched]) -> None:
    """At exit, stop the exporters whose receiver is down before the provider flushes the spans left: those would
    wait out their retries (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s) for nothing, and a kernel's restart with them."""
    for exporter in exporters:
        if exporter.failing or TROUBLE.retrying:
            exporter.shutdown()


class _Trouble(logging.Handler):
    """What OpenTelemetry logs while it exports (a receiver down, refusing, or slow): its export thread logs it, and
    in a kernel the standard handling would print it into whatever cell runs next. It goes to the process's own
    stderr instead (:func:`~agentkernel.descriptors.process_log`: a kernel's terminal or the Jupyter server's log,
    the descriptor ipykernel keeps, never a cell), redacted, and the first since a run last asked is kept for
    the next run to say in one line (:func:`export_trouble`): it names the cause, the later ones say the retries
    failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.first: str | None = None
        self.retrying = False
        """Whether an exporter said it will try again (an export that failed once has not returned yet)."""

    def emit(self, record: logging.LogRecord) -> None:
        text = KERNEL.current.redact(record.getMessage())
        self.retrying = self.retrying or "retrying" in text
        if self.first is None and "export" in text.lower():  # (not the SDK's other warnings)
            self.first = text
        try:
            stream = process_log("stderr")
            stream.write(f"{record.name}: {text}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stderr: the next run still says it
            pass


TROUBLE = _Trouble()


def export_trouble() -> str | None:
    """One line saying why spans could not be exported since it was last asked (None: no trouble), for a run to
    show; what OpenTelemetry logged is in the process's stderr. Only for the provider agentkernel made: a user's own
    provider logs as the user set up logging."""
    first, TROUBLE.first = TROUBLE.first, None
    if first is None:
        return None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318").rstrip("/") + "/v1/traces"
    cause = re.search(r"\[Errno -?\d+\] [^\"')\]]+", first)  # (a connection's error, at the end of a long line)
    why = cause.group() if cause else short(first.splitlines()[0], 160)
    return f"traces did not reach {KERNEL.current.redact(endpoint)}: {why}"


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=process_log("stdout"))  # the process's own: never a cell
    if name in ("otlp", ""):
        with needs("opentelemetry"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # the endpoint, headers and timeout from the OTEL_EXPORTER_OTLP_* environment
    return None


class RunSpans:
    """A listener of one run's events that makes its spans (give it to ``on_event``).

    ``model`` names the request model, the provider and the server; ``provider`` is a ``TracerProvider`` (default:
    :func:`tracer_provider`); ``content`` puts the prompt, the answer, and tool arguments and outputs into the spans
    (default: :func:`content_wanted`).
    """

    def __init__(self, model: Any, *, provider: Any = None, content: bool | None = None):
        with needs("opentelemetry"):
            from opentelemetry import trace

        self._trace = trace
        self.tracer = (provider or tracer_provider()).get_tracer("agentkernel")
        self.content = content_wanted() if content is None else content
        self.model = str(getattr(model, "name", type(model).__name__))
        named = getattr(getattr(model, "provider", None), "name", None)
        self.provider = str(named or ("agentkernel.scripted" if self.model == "scripted" else "openai"))
        url = urlsplit(str(getattr(model, "base_url", "") or ""))
        self.server = (url.hostname, url.port or (443 if url.scheme == "https" else 80)) if url.hostname else None
        self.run: Any = None
        self.run_id = ""
        self.context: Any = None
        self.chat_name = f"chat {self.model}"
        self.chat_attributes: dict[str, Any] = {}
        self.chat: int | None = None
        """When the open request began (``time.time_ns()``)."""
        self.answered: tuple[dict[str, Any], int | None, int, list[dict[str, Any]]] | None = None
        """With content: a turn's request that has its usage, waiting for its output (its message and calls, which
        the loop commits next): the span's attributes, its start and end, and the output's parts so far."""
        self.calls: dict[str, tuple[int, ToolCall]] = {}
        """The open calls, by id: when each began, and the call."""
        self._handlers: dict[type, Any] = {
            RunStarted: self._start, RoundStarted: self._round, UsageUpdated: self._usage,
            ToolCallStarted: self._call_started, ToolCallFinished: self._call_finished,
            ItemCommitted: self._item, ContextCompacted: self._compaction, RunFinished: self._finish}

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))  # (most events, the text deltas, need nothing)
        if handler is None or self.run is None and handler != self._start:
            return
        if self.answered is not None and type(event) is not ItemCommitted:  # the response's output is all told
            self._end_answered()
        handler(event)

    def _item(self, event: ItemCommitted) -> None:
        """With content: the prompt goes on the run's span, a response's message and calls on its request's."""
        item = event.item
        if not self.content:
            return
        if item.get("role") == "user":
            self.run.set_attribute("gen_ai.input.messages", _messages("user", [_text(item.get("content"))]))
        elif self.answered is not None and item.get("type") == "function_call":
            self.answered[3].append({"type": "tool_call", "id": item["call_id"], "name": item["name"],
                                     "arguments": _cut(item["arguments"])})
        elif self.answered is not None and item.get("role") == "assistant":
            self.answered[3].append(_text(item.get("content")))

    def _compaction(self, event: ContextCompacted) -> None:
        c = event.compaction
        self.run.add_event("agentkernel.compaction", {
            "agentkernel.compaction.reason": c.reason, "agentkernel.compaction.tokens_before": c.tokens_before,
            "agentkernel.compaction.tokens_after": c.tokens_after,
            "agentkernel.compaction.outputs_elided": c.outputs_elided,
            "agentkernel.compaction.turns_summarised": c.turns_summarised})

    # -- spans --------------------------------------------------------------------------------------------------
    # A request's and a call's spans have no children, so each is made whole when it ends (started at the time it
    # began): the SDK checks its attributes once, and no span object lives while the request or the call runs.

    def _span(self, name: str, attributes: dict[str, Any], kind: Any, start: int | None = None) -> Any:
        return self.tracer.start_span(name, context=self.context, kind=kind, attributes=attributes, start_time=start)

    def _start(self, event: RunStarted) -> None:
        self.run_id = event.run_id
        self.context = None  # a child of whatever span is current (the user's), else a trace of its own
        self.run = self._span("invoke_agent agentkernel", {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model, "gen_ai.conversation.id": event.run_id,
            "gen_ai.agent.name": "agentkernel", "gen_ai.agent.id": event.run_id}, self._trace.SpanKind.INTERNAL)
        if self.content and event.system:
            self.run.set_attribute("gen_ai.system_instructions",
                                   json.dumps([_text(event.system)]))
        self.context = self._trace.set_span_in_context(self.run)
        # What every request's span holds (the model and the provider on the run's and the requests' spans only:
        # a tool's span holds what is its own, and every attribute costs the SDK a check).
        self.chat_attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider,
                                "gen_ai.request.model": self.model, "gen_ai.conversation.id": self.run_id}
        if self.server is not None:
            self.chat_attributes.update({"server.address": self.server[0], "server.port": self.server[1]})

    def _round(self, event: RoundStarted) -> None:
        self._end_chat()  # (one left open by a response that never said its usage)
        self.chat = time_ns()

    def _chat(self, attributes: dict[str, Any], start: int | None, end: int | None = None) -> None:
        self._span(self.chat_name, {**self.chat_attributes, **attributes}, self._trace.SpanKind.CLIENT,
                   start).end(end_time=end)

    def _usage(self, event: UsageUpdated) -> None:
        start = self.chat  # (None for a compaction's summary request, which has no round: it starts as it is told)
        self.chat = None
        attributes: dict[str, Any] = {"gen_ai.response.finish_reasons": [event.finish_reason or "stop"]}
        usage = event.response
        if usage is not None:  # the counts a response has (cached, cache writes, reasoning: when there were any)
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            if usage.cache_read_tokens:
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            if usage.cache_write_tokens:
                attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
            if usage.reasoning_tokens:
                attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
            if usage.estimated:
                attributes["agentkernel.usage.estimated"] = True
        if event.purpose != "turn":
            attributes["agentkernel.request.purpose"] = event.purpose
        if event.usage.cost is not None:
            attributes["agentkernel.run.cost"] = event.usage.cost  # the run's cost so far
        if self.content and event.purpose == "turn":
            self.answered = (attributes, start, time_ns(), [])
        else:
            self._chat(attributes, start)

    def _end_answered(self) -> None:
        assert self.answered is not None
        attributes, start, end, parts = self.answered
        self.answered = None
        attributes["gen_ai.output.messages"] = _messages(
            "assistant", parts, finish_reason=attributes["gen_ai.response.finish_reasons"][0])
        self._chat(attributes, start, end)

    def _end_chat(self) -> None:
        if self.chat is not None:
            self._chat({}, self.chat)
        self.chat = None

    def _call_started(self, event: ToolCallStarted) -> None:
        self.calls[event.call.call_id] = (time_ns(), event.call)

    def _call_finished(self, event: ToolCallFinished) -> None:
        result = event.result
        start, call = self.calls.pop(result.call_id, (None, result.call))  # (None: never started, as a budget,
        # a cut response or Stop leave a call: a span of its own, as long as it lasted)
        self._call_span(call, result, start)

    def _call_span(self, call: Any, result: Any, start: int | None) -> None:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                                      "gen_ai.tool.call.id": call.call_id, "gen_ai.tool.type": "function"}
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = _cut(call.arguments)
        status = None
        if result is not None:  # (None: a call still open when its run was cancelled)
            attributes["agentkernel.tool.status"] = result.status  # (the span's length: its duration)
            if result.status == "denied":
                attributes["agentkernel.tool.denied"] = True
                attributes["agentkernel.tool.denial_reason"] = _cut(result.output)
            elif result.status == "aborted":
                attributes["agentkernel.tool.cut"] = True
            if self.content:
                attributes["gen_ai.tool.call.result"] = _cut(result.output)
            if result.status in ("error", "aborted", "not_run"):
                attributes["error.type"] = result.status
                status = self._trace.Status(self._trace.StatusCode.ERROR, _cut(result.output, 200))
        span = self._span(f"execute_tool {call.name}", attributes, self._trace.SpanKind.INTERNAL, start)
        if status is not None:
            span.set_status(status)
        span.end()

    def _end_calls(self) -> None:
        """End the calls still open (a run cancelled, a session closed) as they were told so far."""
        for start, call in self.calls.values():
            self._call_span(call, None, start)
        self.calls.clear()

    def _finish(self, event: RunFinished) -> None:
        result = event.result
        self._end_chat()
        self._end_calls()
        status = result.status
        name = ("agentkernel.guard" if status in GUARDS else "agentkernel.budget" if status in BUDGETS else
                "agentkernel.interrupt" if status == "aborted" and result.detail == CANCELLED else
                "agentkernel.stop" if status == "aborted" else "")
        if name:
            self.run.add_event(name, {"agentkernel.status": status, "agentkernel.detail": _cut(result.detail, 500)})
        usage = result.usage
        self.run.set_attributes({
            "agentkernel.status": status, "agentkernel.rounds": result.rounds,
            "agentkernel.tool_calls": result.tool_calls, "agentkernel.denied_calls": result.denied_calls,
            "agentkernel.compactions": result.compactions,
            "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
            "agentkernel.usage.estimated_requests": usage.estimated_requests})
        if usage.cost is not None:
            self.run.set_attribute("agentkernel.cost", usage.cost)
        if self.content and result.answer:
            self.run.set_attribute("gen_ai.output.messages", _messages("assistant", [_text(result.answer)]))
        if status not in ("complete", "aborted"):
            self.run.set_attribute("error.type", status)
            self.run.set_status(self._trace.Status(self._trace.StatusCode.ERROR, _cut(result.detail, 200)))
        self.run.end()
        self.run = None


class SessionSpans(RunSpans):
    """A listener of one ``%agent_serve`` session's events that makes its spans, a trace of its own: an
    ``agentkernel.serve`` span (kind ``SERVER``) from now to the session's end (:class:`RunFinished`), and under it an
    ``execute_tool`` span per served call, as a run's."""

    def __init__(self, session_id: str, tools: list[str], *, provider: Any = None, content: bool | None = None):
        super().__init__(None, provider=provider, content=content)
        from opentelemetry.context import Context

        self.run_id = session_id
        self.run = self.tracer.start_span("agentkernel.serve", context=Context(), kind=self._trace.SpanKind.SERVER,
                                          attributes={"gen_ai.conversation.id": session_id,
                                                      "agentkernel.serve.tools": tools})
        self.context = self._trace.set_span_in_context(self.run)
        self.served = 0
        self.ending: Any = None  # the session's end, told while a call was still open

    def _call_finished(self, event: ToolCallFinished) -> None:
        self.served += 1
        super()._call_finished(event)
        if self.ending is not None and not self.calls:
            self._end(self.ending)

    def _finish(self, event: RunFinished) -> None:
        # Stop ends the session before the call it cuts says how it ended: the session's span waits for it.
        self.ending = event.result
        if not self.calls:
            self._end(event.result)

    def _end(self, result: Any) -> None:
        if result.status == "aborted":
            self.run.add_event("agentkernel.stop", {"agentkernel.detail": _cut(result.detail, 500)})
        self.run.set_attributes({"agentkernel.status": result.status, "agentkernel.detail": _cut(result.detail, 500),
                                 "agentkernel.tool_calls": self.served})
        self.run.end()
        self.run = None

CANCELLED = Trip("aborted", "the run was cancelled").detail
"""The detail of a run cancelled from outside (the kernel's interrupt, a second interrupt): an interrupt."""


def _cut(text: Any, limit: int = MAX_CONTENT) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters in all)"


def _text(text: Any) -> dict[str, Any]:
    """A message's text part, cut."""
    return {"type": "text", "content": _cut(text)}


def _messages(role: str, parts: list[dict[str, Any]], **fields: Any) -> str:
    """One message of ``role`` as the conventions' ``gen_ai.*.messages`` attributes hold it (JSON)."""
    return json.dumps([{"role": role, "parts": parts, **fields}], ensure_ascii=False)

