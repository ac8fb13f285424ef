"""History items in the OpenAI Responses shape, the invariant that keeps them resumable, and the transcript.

Items are plain dicts:

- ``{"type": "message", "role": "user" | "assistant", "content": "..."}``
- ``{"type": "function_call", "call_id": "...", "name": "...", "arguments": "<json string>"}``
- ``{"type": "function_call_output", "call_id": "...", "output": "..."}`` (``"synthetic": True`` when the
  runtime wrote it because the tool never ran or never finished)

The invariant: every ``function_call`` has exactly one ``function_call_output`` after it with the same
``call_id``, and no output is without its call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

Item = dict[str, Any]


def user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": text}


def assistant_message(text: str) -> Item:
    return {"type": "message", "role": "assistant", "content": text}


def function_call(call_id: str, name: str, arguments: str) -> Item:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def function_call_output(call_id: str, output: str, *, synthetic: bool = False) -> Item:
    item: Item = {"type": "function_call_output", "call_id": call_id, "output": output}
    if synthetic:
        item["synthetic"] = True
    return item


def history_problems(history: Iterable[Item]) -> list[str]:
    """Every way ``history`` breaks the invariant, as readable sentences (empty when it holds)."""
    problems: list[str] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, item in enumerate(history):
        kind = item.get("type")
        call_id = item.get("call_id")
        if kind == "function_call":
            if call_id in open_calls or call_id in answered:
                problems.append(f"item {index}: call_id {call_id!r} is used by more than one function_call")
            else:
                open_calls[call_id] = index
        elif kind == "function_call_output":
            if call_id in open_calls:
                del open_calls[call_id]
                answered.add(call_id)
            elif call_id in answered:
                problems.append(f"item {index}: second output for call_id {call_id!r}")
            else:
                problems.append(f"item {index}: output for call_id {call_id!r} has no function_call before it")
    for call_id, index in open_calls.items():
        problems.append(f"item {index}: function_call {call_id!r} has no output")
    return problems


class HistoryError(ValueError):
    """A history breaks the call/output invariant."""


def validate_history(history: Iterable[Item]) -> None:
    """Raise :class:`HistoryError` naming every problem if the call/output invariant does not hold."""
    problems = history_problems(history)
    if problems:
        raise HistoryError("; ".join(problems))


MISSING_OUTPUT = "no output: the run stopped before this call finished"


def repair_history(history: Iterable[Item]) -> list[Item]:
    """Return a copy of ``history`` that satisfies the invariant.

    Outputs without a call before them and second outputs are dropped, as is a call that reuses a call_id.
    A call left without an output gets a synthetic one at the end of its round (the run of call and
    output items it stands in), so the model sees every call answered before the conversation goes on.
    """
    kept: list[Item] = []
    calls: set[str] = set()
    answered: set[str] = set()
    for item in history:
        kind, call_id = item.get("type"), item.get("call_id")
        if kind == "function_call":
            if call_id in calls:
                continue
            calls.add(call_id)
        elif kind == "function_call_output":
            if call_id not in calls or call_id in answered:
                continue
            answered.add(call_id)
        kept.append(dict(item))

    repaired: list[Item] = []
    unanswered: list[str] = []
    for item in kept:
        in_round = item.get("type") in ("function_call", "function_call_output")
        if not in_round:
            repaired.extend(_missing_outputs(unanswered))
            unanswered = []
        repaired.append(item)
        if item.get("type") == "function_call" and item["call_id"] not in answered:
            unanswered.append(item["call_id"])
    repaired.extend(_missing_outputs(unanswered))
    return repaired


def _missing_outputs(call_ids: list[str]) -> list[Item]:
    return [function_call_output(call_id, MISSING_OUTPUT, synthetic=True) for call_id in call_ids]


def transcript_dir() -> Path:
    """Where run transcripts go unless a run says otherwise (``AGENTKERNEL_TRANSCRIPTS`` overrides)."""
    return Path(os.environ.get("AGENTKERNEL_TRANSCRIPTS", "~/.agentkernel/transcripts")).expanduser()


class Transcript:
    """Appends a run's items to a JSONL file as they are committed, flushing each line.

    Lines are ``{"event": "item", "item": {...}}``, with one ``{"event": "start", ...}`` first and one
    ``{"event": "finish", ...}`` last, so a kernel that dies loses nothing committed before it died.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        if _ends_mid_line(self.path):  # an earlier run died mid-write: keep this run's first record whole
            self._file.write("\n")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def item(self, item: Item) -> None:
        self.write({"event": "item", "item": item})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def load_transcript(path: str | os.PathLike[str]) -> list[Item]:
    """Read the items of a transcript back as a repaired history, ready to resume from.

    A file that several runs appended to gives the last run's history (each run's ``start`` record is
    followed by the whole history it began from). A torn line (the kernel died mid-write) is skipped.
    """
    items: list[Item] = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():  # may end mid-character
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):  # a torn line can still parse, e.g. as a number
            continue
        if record.get("event") == "start":
            items = []
        elif record.get("event") == "item" and isinstance(record.get("item"), dict):
            items.append(record["item"])
    return repair_history(items)
