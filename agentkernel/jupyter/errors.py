"""The errors a ``%%agent`` cell ends with: one class per stop, shown without internal stack frames."""

from __future__ import annotations

from ..endings import Status
from ..errors import AgentConfigError, AgentError
from ..result import LoopResult
from ..text import reveal

__all__ = ["STOP_ERRORS", "AgentConfigError", "AgentError", "AgentStop", "RunInterrupted"]


class RunInterrupted(KeyboardInterrupt):
    """The kernel interrupt stopped a run cleanly; the cell still ends with a KeyboardInterrupt, so queued cells
    do not run, but without the package's stack frames (which would put machine paths into saved notebooks)."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mKeyboardInterrupt\x1b[0m: {self}"]


# The error output's ename is the class name; Jupyter users expect to read KeyboardInterrupt there.
RunInterrupted.__name__ = RunInterrupted.__qualname__ = "KeyboardInterrupt"


class AgentStop(AgentError):
    """A run stopped by a guard, a budget or a model failure; the one-line message begins with the status code.

    ``REPEATED_TOOL_CALL: read_file {"path": "a.txt"} returned the same output 3 times (after 3 rounds and 3 tool
    calls; the partial result is in _agent)``
    """

    def __init__(self, result: LoopResult):
        where = f"after {result.work}; the partial result is in _agent"
        # the detail may quote the model (a call's arguments): an escape sequence in it is shown, not obeyed
        super().__init__(reveal(f"{result.status.upper()}: {result.detail_clause} ({where})")[0])
        self.result = result


class RepeatedToolCall(AgentStop):
    """The same tool call with the same arguments returned the same output too many times."""


class NoProgress(AgentStop):
    """The model cycled between the same calls or repeated empty or identical turns."""


class ToolFailure(AgentStop):
    """Every tool call failed for several rounds in a row."""


class FatalError(AgentStop):
    """The model API failed (after retries), refused the key, or broke its stream."""


class Truncated(AgentStop):
    """The server cut the model's response short (output length or content filter); no call from it was run."""


class ContextOverflow(AgentStop):
    """A request could not be made to fit the model's context window, even after compacting the view."""


class HitIterationCap(AgentStop):
    """The run used all its model requests (``--max-iterations``)."""


class HitTokenCap(AgentStop):
    """The run used its token budget (``--max-tokens``)."""


class HitWallClock(AgentStop):
    """The run used its wall-clock budget (``--max-seconds``)."""


class HitToolCallCap(AgentStop):
    """The run used its tool-call budget (``--max-tool-calls``)."""


class HitCostCap(AgentStop):
    """The run used its cost budget (``--max-cost``)."""


class GatewayBudget(AgentStop):
    """The LLM gateway (the LiteLLM proxy, ...) refused a request: the key's budget is spent."""


STOP_ERRORS: dict[Status, type[AgentStop]] = {
    "repeated_tool_call": RepeatedToolCall,
    "no_progress": NoProgress,
    "tool_failure": ToolFailure,
    "fatal_error": FatalError,
    "truncated": Truncated,
    "context_overflow": ContextOverflow,
    "hit_iteration_cap": HitIterationCap,
    "hit_token_cap": HitTokenCap,
    "hit_wall_clock": HitWallClock,
    "hit_tool_call_cap": HitToolCallCap,
    "hit_cost_cap": HitCostCap,
    "gateway_budget": GatewayBudget,
}
