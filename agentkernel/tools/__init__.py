"""Tools: what a tool is (:mod:`.base`), running a round of calls (:mod:`.runner`), their schemas and timeouts, and
the built-in file tools (:mod:`.files`)."""

from .base import (
    MAX_OUTPUT_CHARS,
    ApprovalAsked,
    ApprovalDecided,
    Approver,
    Decision,
    Display,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolResult,
    ToolStatus,
    Verdict,
    as_registry,
    format_output,
    parse_arguments,
    tool,
)
from .runner import TOOL_FAULTS, ToolRunner, ToolTimeout, Turns, in_thread, invoke

__all__ = [
    "MAX_OUTPUT_CHARS", "TOOL_FAULTS", "ApprovalAsked", "ApprovalDecided", "Approver", "Decision", "Display", "Tool",
    "ToolCall", "ToolContext", "ToolError", "ToolOutput", "ToolResult", "ToolRunner", "ToolStatus", "ToolTimeout",
    "Turns", "Verdict", "as_registry", "format_output", "in_thread", "invoke", "parse_arguments", "tool",
]
