"""What a tool is: the ``@tool`` decorator, the :class:`Tool` it makes, a call and its output, an approval.

Running calls is :mod:`agentkernel.tools.runner`'s.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, ParamSpec, TypeVar, overload

from ..text import read_arguments
from .schemas import Arguments, arguments_of, parameter_of_type, parse_docstring

ToolStatus = Literal["ok", "error", "denied", "aborted", "not_run"]

P = ParamSpec("P")
R = TypeVar("R")

MAX_OUTPUT_CHARS = 20_000
"""A tool's output is cut to this many characters unless it sets its own ``max_output_chars``."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool is handed about its call: a tool function with a parameter annotated ``ToolContext`` gets it
    (that parameter is not shown to the model)::

        @tool(read_only=False)
        def add_note(text: str, ctx: ToolContext) -> str:
            notes.append({"text": text, "call": ctx.call_id})
            return "noted"
    """

    call_id: str
    name: str
    run_id: str = ""


@dataclass(repr=False)
class Tool(Generic[P, R]):
    """A function the model may call, with the JSON schema it is shown; calling it calls the function."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[P, R]
    read_only: bool = True
    timeout: float | None = 60.0
    max_output_chars: int | None = MAX_OUTPUT_CHARS
    anytime: bool = False
    """Whether the tool may run while one of the user's cells runs: it touches neither the notebook's namespace nor
    its cells (the file tools, MCP tools). Other tools of a run that is not the running cell's own (a background run,
    a served session) wait for the user's cell to end (see :class:`~agentkernel.tools.runner.Turns`)."""
    arguments_model: Arguments | None = field(default=None, compare=False)
    """The pydantic model of the arguments (built from ``fn`` when not given)."""
    is_async: bool = field(init=False, repr=False, compare=False)
    """Whether ``fn`` is a coroutine function (run in the loop's task, not in a worker thread)."""
    context_parameter: str | None = field(init=False, repr=False, compare=False)
    """The parameter that is handed the call's :class:`ToolContext`, if ``fn`` has one."""

    def __post_init__(self) -> None:
        self.context_parameter = parameter_of_type(self.fn, ToolContext)
        if self.arguments_model is None:
            self.arguments_model = arguments_of(self.fn, {}, skip=[self.context_parameter or ""])
        self.is_async = inspect.iscoroutinefunction(self.fn)
        # `help(t)`, `inspect.signature(t)` and `t?` show the user's function. Its __dict__ is not merged in: it
        # could hold names of this class's fields.
        functools.update_wrapper(self, self.fn, updated=())

    def schema(self) -> dict[str, Any]:
        """The tool in the Responses API ``tools`` shape."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }

    def validate(self, arguments: str) -> dict[str, Any]:
        """The keyword arguments for a call from its arguments JSON; raise ValueError saying what is wrong."""
        assert self.arguments_model is not None
        return self.arguments_model.validate(arguments)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> Tool[P, R]:
        # Never binds (a tool stays the function it wraps); being a descriptor makes help() document it as one.
        return self

    def __repr__(self) -> str:
        try:
            signature = inspect.signature(self.fn)
            params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
            shown = str(signature.replace(parameters=params, return_annotation=signature.empty))
        except (TypeError, ValueError):
            shown = "(...)"
        return f"<tool {self.name}{shown} {'read-only' if self.read_only else 'side effects'}>"


@overload
def tool(
    fn: Callable[P, R], /, *, name: str | None = None, read_only: bool = True, timeout: float | None = 60.0,
    max_output_chars: int | None = MAX_OUTPUT_CHARS, anytime: bool = False,
) -> Tool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, read_only: bool = True, timeout: float | None = 60.0,
    max_output_chars: int | None = MAX_OUTPUT_CHARS, anytime: bool = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    read_only: bool = True,
    timeout: float | None = 60.0,
    max_output_chars: int | None = MAX_OUTPUT_CHARS,
    anytime: bool = False,
) -> Tool[..., Any] | Callable[[Callable[..., Any]], Tool[..., Any]]:
    """Turn a plain function (sync or async) into a :class:`Tool` that still behaves like the function.

    The schema comes from the signature and type hints (through pydantic, which also checks each call's
    arguments); the description and parameter descriptions from the docstring (its first paragraphs, and an
    ``Args:`` section). Tools are read-only by default; pass ``read_only=False`` for one with side effects, which
    then runs only after approval. A sync function runs in a worker thread, cut off after ``timeout`` seconds;
    its output is cut to ``max_output_chars`` characters (``None``: no limit)::

        @tool
        def word_count(text: str) -> int:
            "Count the words in a text."
            return len(text.split())

    A tool may read or change the notebook's variables, so a background run (``%%agent --background``) or a served
    session runs it only between the user's cells. ``anytime=True`` marks a tool that touches neither the namespace
    nor the notebook (it reads files, calls a web API): it then runs at once, even while a cell of the user's runs.
    """

    def wrap(f: Callable[..., Any]) -> Tool[..., Any]:
        f = f.fn if isinstance(f, Tool) else f
        description, arg_docs = parse_docstring(inspect.getdoc(f) or "")
        arguments = arguments_of(f, arg_docs, skip=[parameter_of_type(f, ToolContext) or ""])
        return Tool(
            name=name or f.__name__,
            description=description or f.__name__.replace("_", " "),
            parameters=arguments.json_schema(),
            fn=f,
            read_only=read_only,
            timeout=timeout,
            max_output_chars=max_output_chars,
            anytime=anytime,
            arguments_model=arguments,
        )

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True)
class Display:
    """A rich output for front ends to show in the call's section (a figure, a table): a MIME bundle."""

    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolOutput:
    """What a tool returns to give more than text: images for the model, displays for the person.

    ``images`` are dicts ``{"media_type": "image/png", "data": "<base64>", ...}`` (see
    :mod:`agentkernel.record.images`, which bounds their size); the text is what the guards, the panel and
    text-only APIs see, so it should say what each image is. The loop puts the images on the call's
    ``function_call_output`` item as ``"images"``. ``displays`` go to the front ends with the call's result and
    never to the model.
    """

    text: str
    images: list[dict[str, Any]] = field(default_factory=list)
    displays: list[Display] = field(default_factory=list)


class ToolError(Exception):
    """A tool's failure that still has something to show: ``displays`` reach the call's section as for a result."""

    def __init__(self, message: str, displays: Iterable[Display] = ()):
        super().__init__(message)
        self.displays = tuple(displays)


@dataclass(frozen=True)
class ToolCall:
    """One call the model requested, with its final ``call_id``.

    The arguments JSON is read once, when the call is made: ``normalized`` is the form the guards compare (keys
    sorted at every depth), ``argument_error`` why the text is not a JSON object.
    """

    call_id: str
    name: str
    arguments: str
    normalized: str = field(init=False, repr=False, compare=False)
    argument_error: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalized, error = read_arguments(self.arguments)
        object.__setattr__(self, "normalized", normalized)
        object.__setattr__(self, "argument_error", error)


@dataclass(frozen=True)
class ToolResult:
    """A call's outcome: its status, the output the model reads, images for the model and displays for people.

    ``synthetic`` outputs were made by the loop for a call that never finished (Stop, a budget, a cut response).
    """

    call: ToolCall
    status: ToolStatus
    output: str
    images: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    displays: tuple[Display, ...] = field(default=(), repr=False)
    duration: float = 0.0
    synthetic: bool = False

    @property
    def call_id(self) -> str:
        return self.call.call_id

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def arguments(self) -> str:
        return self.call.arguments

    @property
    def failed(self) -> bool:
        return self.status == "error"


@dataclass(frozen=True)
class Decision:
    """An approver's answer with more to it than ``True`` / ``False``.

    ``Decision(approve=True, for_run=True)`` runs this call and every later call of the same tool in this run
    unasked (never in another run: each run, each ``%%agent`` cell, asks afresh). ``Decision(approve=False,
    note="use the parquet file instead")`` denies the call and sends the note to the model as its output, so the
    run goes on, steered. Only ``approve is True`` approves. ``Decision(approve=False, reason="nobody can approve it
    here (CI is set)")`` is a denial nobody decided: the reason (and the way out) replaces "the user denied it".
    """

    approve: bool
    for_run: bool = False
    note: str = ""
    reason: str = ""
    """A denial nobody decided: why (replacing "the user denied it"); an approval nobody was asked for: why
    (``--allow-writes``)."""
    asked: str = ""
    """Why the call was asked about, when it is not that the tool has side effects (``"may have side effects: its MCP
    server's annotations are not trusted"``); the denial then says that instead."""
    by: DecidedBy | None = None
    """Who decided, when not the user: ``headless`` (nobody can be asked here), ``policy`` (a rule of the run, such
    as ``approval_timeout``)."""


DecidedBy = Literal["user", "rule", "headless", "policy"]
"""Who decided an approval: the ``user`` (a click, a terminal answer), a ``rule`` (the tool was approved for the
run), ``headless`` (nobody can be asked where the kernel runs) or a ``policy`` (no approver, an approval timeout, an
approver that failed)."""


@dataclass
class ApprovalAsked:
    """A side-effecting call waits for its approval (asked at ``at``, the runner's ``time.monotonic()``)."""

    call: ToolCall
    at: float = 0.0


@dataclass
class ApprovalDecided:
    """A side-effecting call's approval was decided: by whom, after how many seconds, with the user's note or the
    reason a denial nobody decided gives (``stopped``: the run was stopped while it waited)."""

    call: ToolCall
    approved: bool
    by: DecidedBy
    waited: float = 0.0
    for_run: bool = False
    note: str = ""
    reason: str = ""
    stopped: bool = False


Verdict = bool | Decision
Approver = Callable[[ToolCall, Tool], "Verdict | Awaitable[Verdict]"]
"""Asked before each side-effecting call: only ``True`` or ``Decision(approve=True)`` runs it; anything else denies."""


def parse_arguments(tool: Tool, arguments: str) -> dict[str, Any]:
    """Parse a call's arguments JSON and check it against the tool's schema; raise ValueError saying what is wrong."""
    return _checked_arguments(tool, ToolCall("", tool.name, arguments))


def _checked_arguments(tool: Tool, call: ToolCall) -> dict[str, Any]:
    if call.argument_error:
        raise ValueError(call.argument_error)
    return tool.validate(call.arguments)


def format_output(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def as_registry(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Map tool names to tools, wrapping plain functions with ``@tool``; a name used twice is an error."""
    registry: dict[str, Tool] = {}
    for t in tools:
        t = t if isinstance(t, Tool) else tool(t)
        if t.name in registry:
            raise ValueError(f"two tools are named {t.name!r}")
        registry[t.name] = t
    return registry
