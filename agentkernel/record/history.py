"""History items in the OpenAI Responses shape, and the invariant that keeps them resumable.

Items are plain dicts:

- ``{"type": "message", "role": "user" | "assistant", "content": "..."}``
- ``{"type": "function_call", "call_id": "...", "name": "...", "arguments": "<json string>"}``
- ``{"type": "function_call_output", "call_id": "...", "output": "..."}`` (``"synthetic": True`` when the
  runtime wrote it because the tool never ran or never finished; ``"images": [{"media_type": ..., "data":
  "<base64>", ...}]`` when the tool gave the model images beside the text, see :mod:`agentkernel.record.images`)

The invariant: every ``function_call`` has exactly one ``function_call_output`` after it with the same
``call_id``, and no output is without its call. Every string in an item is valid Unicode (see :func:`valid_item`),
so a history can always be written, shown and sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..text import map_strings, valid_text

Item = dict[str, Any]


def user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": text}


def assistant_message(text: str) -> Item:
    return {"type": "message", "role": "assistant", "content": text}


def function_call(call_id: str, name: str, arguments: str) -> Item:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def function_call_output(call_id: str, output: str, *, synthetic: bool = False,
                         images: list[dict[str, Any]] | None = None) -> Item:
    item: Item = {"type": "function_call_output", "call_id": call_id, "output": output}
    if synthetic:
        item["synthetic"] = True
    if images:
        item["images"] = images
    return item


def valid_item(item: Item) -> Item:
    """``item`` with lone surrogates replaced in every string it holds, at any depth: the item itself when all its
    values are ASCII text (the common case, checked quickly), else a copy."""
    for value in item.values():  # a loop, not all(...): this runs for every item a run commits
        if type(value) is not str or not value.isascii():
            break
    else:
        return item
    clean = map_strings(item, valid_text)
    return clean if isinstance(clean, dict) else item


def history_problems(history: Iterable[Item]) -> list[str]:
    """Every way ``history`` breaks the invariant, as readable sentences (empty when it holds)."""
    problems: list[str] = []
    open_calls: dict[Any, int] = {}  # call ids as found, even malformed ones (None, numbers)
    answered: set[Any] = set()
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

    Outputs without a call before them and second outputs are dropped, as is a call that reuses a call_id
    and a call or output whose call_id is not a string.
    A call left without an output gets a synthetic one at the end of its round (the run of call and
    output items it stands in), so the model sees every call answered before the conversation goes on.
    Lone surrogates in any string are replaced (:func:`valid_item`).
    """
    kept: list[Item] = []
    calls: set[str] = set()
    answered: set[str] = set()
    for item in map(valid_item, history):
        kind, call_id = item.get("type"), item.get("call_id")
        if kind in ("function_call", "function_call_output"):
            if not isinstance(call_id, str):
                continue  # nothing can be matched to it (a hand-edited or corrupt transcript)
            if kind == "function_call":
                if call_id in calls:
                    continue
                calls.add(call_id)
            else:
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
