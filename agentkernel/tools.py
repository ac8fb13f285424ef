"""Tools: the ``@tool`` decorator, JSON schemas from signatures, and running one round's calls.

Calls of a round run in parallel and are matched to their requests by ``call_id``; a side-effecting tool runs
only after approval and never beside another call.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .text import load_arguments

ToolStatus = Literal["ok", "error", "denied", "aborted", "not_run"]


@dataclass
class Tool:
    """A function the model may call, with the JSON schema it is shown."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    read_only: bool = True
    timeout: float | None = 60.0

    def schema(self) -> dict[str, Any]:
        """The tool in the Responses API ``tools`` shape."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    read_only: bool = True,
    timeout: float | None = 60.0,
) -> Any:
    """Turn a plain function (sync or async) into a :class:`Tool`.

    The schema comes from the signature and type hints; the description and parameter descriptions from the
    docstring (its first paragraph, and an ``Args:`` section). Tools are read-only by default; pass
    ``read_only=False`` for one with side effects, which then runs only after approval::

        @tool
        def word_count(text: str) -> int:
            "Count the words in a text."
            return len(text.split())
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        description, arg_docs = _parse_docstring(inspect.getdoc(f) or "")
        return Tool(
            name=name or f.__name__,
            description=description or f.__name__.replace("_", " "),
            parameters=_parameters_schema(f, arg_docs),
            fn=f,
            read_only=read_only,
            timeout=timeout,
        )

    return wrap(fn) if fn is not None else wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    # Everything before an Args:/Returns:-style section is the description; paragraphs are kept apart.
    head = re.split(r"^(?:Args|Arguments|Parameters|Returns|Raises|Example|Examples):\s*$", doc, maxsplit=1,
                    flags=re.MULTILINE)[0]
    description = "\n\n".join(" ".join(p.split()) for p in head.split("\n\n") if p.strip())
    arg_docs: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if match:
        current, indent = None, None
        for line in match.group(1).splitlines():
            entry = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            line_indent = len(line) - len(line.lstrip())
            if entry and line_indent == (indent or line_indent):  # a new entry starts at the first entry's indent
                current, indent = entry.group(1), line_indent
                arg_docs[current] = entry.group(2).strip()
            elif current and line.strip():  # a continuation line, even one that looks like "word: text"
                arg_docs[current] += " " + line.strip()
    return description, arg_docs


def _json_default(value: Any) -> Any:
    """A default as the schema can hold it: JSON values as they are, anything else (a Path, ...) as its str."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def _json_type(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in (inspect.Parameter.empty, Any):
        return {}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _json_type(options[0]) if len(options) == 1 else {"anyOf": [_json_type(a) for a in options]}
    if origin is Literal:
        return {"enum": list(args)}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is list or origin in (list, tuple, set, frozenset, Iterable):
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        return {"type": "object"}
    return {}


def _parameters_schema(fn: Callable[..., Any], arg_docs: dict[str, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = _json_type(hints.get(pname, param.annotation))
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        if param.default is param.empty:
            required.append(pname)
        elif param.default is not None:
            prop["default"] = _json_default(param.default)
        properties[pname] = prop
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def parse_arguments(tool: Tool, arguments: str) -> dict[str, Any]:
    """Parse a call's arguments JSON and check it against the tool's schema; raise ValueError saying what is wrong."""
    try:
        value = load_arguments(arguments)
    except json.JSONDecodeError as e:
        raise ValueError(f"arguments are not valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    properties = tool.parameters.get("properties", {})
    unknown = sorted(set(value) - set(properties))
    if unknown:
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}; expected {', '.join(properties) or 'none'}")
    missing = [p for p in tool.parameters.get("required", []) if p not in value]
    if missing:
        raise ValueError(f"missing required argument(s) {', '.join(missing)}")
    for key, val in value.items():
        expected = properties[key].get("type")
        if val is not None and expected in _TYPE_CHECKS and not _TYPE_CHECKS[expected](val):
            raise ValueError(f"argument {key!r} must be of type {expected}, got {type(val).__name__}")
        if "enum" in properties[key] and val not in properties[key]["enum"]:
            raise ValueError(f"argument {key!r} must be one of {properties[key]['enum']}")
    return value


@dataclass
class ToolCall:
    """One requested call and, once it is done, its outcome."""

    call_id: str
    name: str
    arguments: str
    status: ToolStatus | None = None
    output: str = ""
    duration: float = 0.0
    synthetic: bool = False
    started: float = field(default=0.0, repr=False)

    @property
    def failed(self) -> bool:
        return self.status == "error"


Approver = Callable[[ToolCall, Tool], "bool | Awaitable[bool]"]


def format_output(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


class ToolTimeout(Exception):
    """A tool ran past its own ``timeout`` (told apart from a ``TimeoutError`` the tool itself raised)."""


async def invoke(tool: Tool, kwargs: dict[str, Any]) -> Any:
    """Call a tool; a sync function runs in a worker thread that copies the context (so prints land in the cell)."""
    if inspect.iscoroutinefunction(tool.fn):
        call: Awaitable[Any] = tool.fn(**kwargs)
    else:
        call = asyncio.to_thread(tool.fn, **kwargs)
    try:
        async with asyncio.timeout(tool.timeout or None) as scope:
            return await call
    except TimeoutError:
        if scope.expired():
            raise ToolTimeout from None
        raise


async def run_call(
    call: ToolCall,
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
) -> None:
    """Run one call and fill in its status and output; never raises for a tool's own failure."""
    call.started = time.monotonic()
    on_start(call)
    try:
        tool = tools.get(call.name)
        if tool is None:
            call.status, call.output = "error", f"error: unknown tool {call.name!r}; available: {', '.join(tools)}"
            return
        try:
            kwargs = parse_arguments(tool, call.arguments)
        except ValueError as e:
            call.status, call.output = "error", f"error: bad arguments for {call.name}: {e}"
            return
        if not tool.read_only:
            verdict = approve(call, tool) if approve else False
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                why = "the user denied it" if approve else "no one is there to approve it"
                call.status, call.output = "denied", f"denied: {call.name} has side effects and {why}"
                return
        try:
            call.output = format_output(await invoke(tool, kwargs))
            call.status = "ok"
        except ToolTimeout:
            call.status, call.output = "error", f"error: {call.name} timed out after {tool.timeout:g} s"
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # the round is being stopped: let the cancellation through
                raise
            # Something inside the tool was cancelled, not the tool: that is the tool's own failure.
            call.status, call.output = "error", f"error: {call.name} was cancelled"
        except Exception as e:  # a tool's own failure is the model's to see, not the loop's to raise
            call.status, call.output = "error", f"error: {type(e).__name__}: {e}"
    finally:
        call.duration = time.monotonic() - call.started


async def run_round(
    calls: list[ToolCall],
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
    on_finish: Callable[[ToolCall], None],
) -> None:
    """Run a round's calls: read-only ones in parallel, then each side-effecting one alone, in request order.

    Each call's result is written into its own :class:`ToolCall`, so callers match by call_id whatever order
    the calls finish in.
    """

    async def one(call: ToolCall) -> None:
        await run_call(call, tools, approve, on_start)
        on_finish(call)

    def side_effecting(call: ToolCall) -> bool:
        return call.name in tools and not tools[call.name].read_only

    parallel = [c for c in calls if not side_effecting(c)]
    if parallel:
        await asyncio.gather(*(one(c) for c in parallel))
    for call in calls:
        if side_effecting(call):
            await one(call)


def as_registry(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Map tool names to tools, wrapping plain functions with ``@tool``; a name used twice is an error."""
    registry: dict[str, Tool] = {}
    for t in tools:
        t = t if isinstance(t, Tool) else tool(t)
        if t.name in registry:
            raise ValueError(f"two tools are named {t.name!r}")
        registry[t.name] = t
    return registry
