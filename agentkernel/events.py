"""What the loop tells its listeners (the notebook panel, the record, the transcript, a CLI, a test) while it runs.

Every event leaves the loop through one :class:`Listeners`, which redacts it (:func:`redacted`) before any listener
sees it: a new road out is one more listener, and cannot skip the redaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .models.base import FunctionCallProgress, TextDelta, UsageEvent
from .record.context import Compaction
from .record.history import Item
from .result import LoopResult
from .secrets import KERNEL, SecretSet
from .text import map_strings
from .tools.base import ApprovalAsked, ApprovalDecided, ToolCall, ToolResult
from .usage import Usage


@dataclass
class RunStarted:
    run_id: str
    model: str
    system: str = ""
    """The system prompt the run was given."""
    history: list[Item] = field(default_factory=list, repr=False)
    """The history the run starts from (before its prompt), which later items extend (:class:`ItemCommitted`)."""
    briefing: dict[str, list[str]] = field(default_factory=dict)
    """Where the run's instructions came from and which skills it was offered (``instructions``, ``skills``)."""


@dataclass
class ItemCommitted:
    """An item was appended to the run's history (the record a transcript keeps and a run resumes from)."""

    item: Item


@dataclass
class RoundStarted:
    round: int


@dataclass
class MessageDone:
    """The assistant finished a message (the full text of what was streamed as :class:`TextDelta`)."""

    text: str


@dataclass
class ToolCallStarted:
    call: ToolCall


@dataclass
class ToolCallFinished:
    """A call has its outcome (``result.status``: ok, error, denied, aborted or not_run)."""

    result: ToolResult


@dataclass
class UsageUpdated:
    """The run's usage so far, after a response's (``response``: as the server reported it, or estimated)."""

    usage: Usage
    response: UsageEvent | None = None
    purpose: str = "turn"
    """What the request was for: ``turn`` (the model's next turn) or ``summary`` (a compaction's note)."""
    finish_reason: str = ""
    """Why the response ended: the server's word when it cut it short (``length``, ...), else ``tool_calls`` or
    ``stop``."""


@dataclass
class ContextUpdated:
    """How full the model's context window is expected to be for the next request (``window`` None: unknown)."""

    fill: int
    window: int | None


@dataclass
class ContextCompacted:
    """The model's view of the history was compacted (the history itself is unchanged)."""

    compaction: Compaction


@dataclass
class ClientSeen:
    """A served session's new client (its name and version, as it says) listed or called tools."""

    client: str


@dataclass
class RunFinished:
    result: LoopResult


Event = (
    RunStarted | RoundStarted | TextDelta | FunctionCallProgress | MessageDone | ToolCallStarted | ToolCallFinished
    | ApprovalAsked | ApprovalDecided | ItemCommitted | UsageUpdated | ContextUpdated | ContextCompacted | ClientSeen
    | RunFinished
)
Listener = Callable[[Event], None]


def redacted(event: Event, source: Redactor | Callable[[], Redactor],
             memo: dict[int, Item] | None = None) -> Event:
    """``event`` with every text that did not come from a tool redacted against the secret set ``source`` (a copy
    when that changed anything).

    A tool's output, error and displays (in a :class:`ToolResult`, and the ``function_call_output`` item made from
    one) were redacted where the runner made them, before any cut (:class:`~agentkernel.tools.runner.ToolRunner`),
    and pass as they are. What else the model, the user or the run wrote
    is redacted here: the system prompt and the history a run starts from, messages, a call's arguments, the
    model's deltas (a secret split across deltas is caught in the whole message), an approval's call, note and
    reason, compaction notes, and the result's
    answer, detail, findings' arguments and history (as the run ends).

    ``source`` is a secret set, or a function giving one, asked only for an event that holds text. ``memo`` keeps each
    history item redacted (by identity) as it is told, so the history at the end is not redacted again.
    """
    if isinstance(event, RoundStarted | UsageUpdated | ContextUpdated | FunctionCallProgress):
        return event  # numbers and names
    secrets: Redactor = source() if callable(source) else source
    text = secrets.redact
    if isinstance(event, ClientSeen):  # what an outside agent says it is
        return _changed(event, client=text(event.client))
    if isinstance(event, TextDelta | MessageDone):
        return _changed(event, text=text(event.text))
    if isinstance(event, ToolCallStarted):
        return _changed(event, call=_redacted_call(event.call, secrets))
    if isinstance(event, ApprovalAsked):
        return _changed(event, call=_redacted_call(event.call, secrets))
    if isinstance(event, ApprovalDecided):  # the user's note and the approver's reason may quote a secret
        return _changed(event, call=_redacted_call(event.call, secrets), note=text(event.note),
                        reason=text(event.reason))
    if isinstance(event, ToolCallFinished):  # the output is the runner's; the call's arguments are the model's
        return _changed(event, result=_changed(event.result, call=_redacted_call(event.result.call, secrets)))
    if isinstance(event, ItemCommitted):
        if event.item.get("type") == "function_call_output":  # made from a ToolResult
            if memo is not None:
                memo[id(event.item)] = event.item
            return event
        return _changed(event, item=_redacted_item(event.item, secrets, memo))
    if isinstance(event, RunStarted):
        return _changed(event, system=text(event.system),
                        history=[_redacted_item(i, secrets, memo) for i in event.history])
    if isinstance(event, ContextCompacted):
        return _changed(event, compaction=_changed(event.compaction, summary=text(event.compaction.summary)))
    if isinstance(event, RunFinished):
        result = event.result
        return _changed(event, result=_changed(
            result, answer=None if result.answer is None else text(result.answer), detail=text(result.detail),
            history=[_redacted_item(item, secrets, memo) for item in result.history],
            partial_findings=[{**f, "arguments": text(f["arguments"])} for f in result.partial_findings]))
    return event


def redacted_result(result: LoopResult, secrets: Redactor | None = None) -> LoopResult:
    """``result`` as the listeners are told it as the run ends (:func:`redacted`): its answer, detail, findings'
    arguments and history with markers for the secrets of ``secrets`` (default: the kernel's set now). What a
    notebook keeps (``_agent``) is this, so every way of showing it shows markers."""
    finished = redacted(RunFinished(result), secrets if secrets is not None else KERNEL.current)
    assert isinstance(finished, RunFinished)
    return finished.result


def _redacted_call(call: ToolCall, secrets: Redactor) -> ToolCall:
    arguments = secrets.redact(call.arguments)
    return call if arguments == call.arguments else ToolCall(call.call_id, call.name, arguments)


def _redacted_item(item: Item, secrets: Redactor, memo: dict[int, Item] | None = None) -> Item:
    """An item with its text redacted; its images (base64 data, not text) are left as they are."""
    if memo is not None and (told := memo.get(id(item))) is not None:
        return told
    if "images" not in item:
        clean = secrets.redact_value(item)
    else:
        clean = {**secrets.redact_value({k: v for k, v in item.items() if k != "images"}), "images": item["images"]}
    if memo is not None:
        memo[id(item)] = clean
    return clean


def _changed(value: Any, **fields: Any) -> Any:
    """``value`` itself when none of ``fields`` differs from what it holds, else a copy with them."""
    if all(getattr(value, k) == v for k, v in fields.items()):
        return value
    return dataclasses.replace(value, **fields)


class Redactor(Protocol):
    """What :func:`redacted` needs of a secret set (a :class:`SecretSet`, or :class:`Listeners`' cache of one)."""

    def redact(self, text: str) -> str: ...

    def redact_value(self, value: Any) -> Any: ...


class _Remembered:
    """A secret set's redaction, remembering the texts it redacted (a call's arguments are told three times, and
    items repeat the same names and types): one dictionary look for a text seen before."""

    LIMIT = 4096
    LONGEST = 4096
    """Texts longer than this many characters are redacted each time, not remembered: what the cache holds stays
    bounded (an outside agent's megabytes of arguments are not kept alive by it)."""

    def __init__(self, secrets: SecretSet):
        self.secrets = secrets
        self.seen: dict[str, str] = {}

    def redact(self, text: str) -> str:
        if len(text) > self.LONGEST:
            return self.secrets.redact(text)
        clean = self.seen.get(text)
        if clean is None:
            if len(self.seen) >= self.LIMIT:
                self.seen.clear()
            clean = self.seen[text] = self.secrets.redact(text)
        return clean

    def redact_value(self, value: Any) -> Any:
        return map_strings(value, self.redact)


class Listeners(list[Listener]):
    """The loop's listeners (a list), told each event in turn, redacted (:func:`redacted`) against the kernel's
    secret set as it is when the event leaves.

    ``Listeners([panel, record, transcript])`` is itself a listener; an empty one is false, so the loop builds no
    event nobody hears.
    """

    def __init__(self, listeners: Iterable[Listener] = (), *, remember: bool = True):
        super().__init__(listeners)
        self.told: dict[int, Item] = {}  # the history's items as told, redacted (see redacted's memo)
        self.remember = remember
        """Keep the history's items as told, for the run's end (a served session, whose calls never end in a
        history, keeps none: its listeners would hold every call it ever served)."""
        self.redactor: _Remembered | None = None  # the secret set they were redacted against

    @classmethod
    def of(cls, on_event: Listener | Iterable[Listener] | None, *last: Listener | None) -> Listeners:
        """The listeners a caller gave (one, a list, or None), then ``last`` (those that are not None)."""
        if callable(on_event) and not isinstance(on_event, list):
            on_event = [on_event]
        return cls([*(on_event or []), *(listener for listener in last if listener is not None)])

    def __call__(self, event: Event) -> None:
        event = redacted(event, self._secrets, self.told if self.remember else None)
        for listener in self:
            listener(event)

    def told_result(self, result: LoopResult) -> LoopResult:
        """``result`` as these listeners are told it as the run ends (:func:`redacted_result`), reusing the history
        items they were already told redacted (a long run's history is not redacted twice)."""
        finished = redacted(RunFinished(result), self._secrets, self.told)
        assert isinstance(finished, RunFinished)
        return finished.result

    def _secrets(self) -> _Remembered:
        secrets = KERNEL.current
        if self.redactor is None or secrets is not self.redactor.secrets:  # a new secret: redact everything afresh
            self.told.clear()
            self.redactor = _Remembered(secrets)
        return self.redactor


__all__ = [
    "ApprovalAsked", "ApprovalDecided", "ClientSeen", "ContextCompacted", "ContextUpdated",
    "Event", "FunctionCallProgress", "ItemCommitted", "Listener", "Listeners", "MessageDone", "RoundStarted",
    "RunFinished", "RunStarted", "TextDelta", "ToolCallFinished", "ToolCallStarted", "UsageUpdated", "redacted",
    "redacted_result",
]
