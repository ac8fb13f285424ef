"""How a run can end: the statuses, and the :class:`Trip` a guard or budget returns to stop a run."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

Status = Literal[
    "complete",            # the model answered: a round with no tool calls
    "aborted",             # Stop, the kernel interrupt, or cancellation
    "fatal_error",         # the model API failed after the SDK's retries, or its stream broke
    "truncated",           # the server cut the model's response short (output length, content filter)
    "context_overflow",    # a request could not be made to fit the model's context window, even compacted
    "repeated_tool_call",  # one (tool, arguments, output) signature occurred repeat_limit times
    "no_progress",         # a call cycle, or stale model turns
    "tool_failure",        # every call failed several rounds in a row
    "hit_iteration_cap",
    "hit_token_cap",
    "hit_wall_clock",
    "hit_tool_call_cap",
    "hit_cost_cap",        # the next request's input, or its output past a cut, would pass --max-cost
    "gateway_budget",      # the LLM gateway refused a request: the key's budget is spent
]
"""Every way a run ends. Its code, shown in error cells, is the upper-case form (``REPEATED_TOOL_CALL``)."""

STATUSES: tuple[Status, ...] = typing.get_args(Status)


@dataclass(frozen=True)
class Trip:
    """A decision to stop: the status and one readable sentence of why."""

    status: Status
    detail: str
