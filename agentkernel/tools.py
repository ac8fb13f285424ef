"""Tools: the ``@tool`` decorator, and running one round's calls.

Calls of a round run in parallel and are matched to their requests by ``call_id``; a side-effecting tool runs
only after approval and never beside another call. Whatever a tool does — raise, call ``sys.exit()``, return
50 MB, hang in a thread — the call gets an output and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, ParamSpec, TypeVar, overload

from .schemas import Arguments, arguments_of, parse_docstring
from .text import cut, read_arguments
from .timeouts import Timeouts

ToolStatus = Literal["ok", "error", "denied", "aborted", "not_run"]

P = ParamSpec("P")
R = TypeVar("R")

MAX_OUTPUT_CHARS = 20_000
"""A tool's output is cut to this many characters unless it sets its own ``max_output_chars``."""

# What a tool may raise that is its own failure, not the run's: also SystemExit (``sys.exit()``, ``exit()``,
# argparse on bad input) and KeyboardInterrupt raised by the tool's code. The user's own interrupt reaches the run
# as the stop signal or as task cancellation, never as an exception inside a tool.
TOOL_FAULTS = (Exception, SystemExit, KeyboardInterrupt)


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
    arguments_model: Arguments | None = field(default=None, compare=False)
    """The pydantic model of the arguments (built from ``fn`` when not given)."""
    is_async: bool = field(init=False, repr=False, compare=False)
    """Whether ``fn`` is a coroutine function (run in the loop's task, not in a worker thread)."""

    def __post_init__(self) -> None:
        if self.arguments_model is None:
            self.arguments_model = arguments_of(self.fn, {})
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
    max_output_chars: int | None = MAX_OUTPUT_CHARS,
) -> Tool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, read_only: bool = True, timeout: float | None = 60.0,
    max_output_chars: int | None = MAX_OUTPUT_CHARS,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    read_only: bool = True,
    timeout: float | None = 60.0,
    max_output_chars: int | None = MAX_OUTPUT_CHARS,
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
    """

    def wrap(f: Callable[..., Any]) -> Tool[..., Any]:
        f = f.fn if isinstance(f, Tool) else f
        description, arg_docs = parse_docstring(inspect.getdoc(f) or "")
        arguments = arguments_of(f, arg_docs)
        return Tool(
            name=name or f.__name__,
            description=description or f.__name__.replace("_", " "),
            parameters=arguments.json_schema(),
            fn=f,
            read_only=read_only,
            timeout=timeout,
            max_output_chars=max_output_chars,
            arguments_model=arguments,
        )

    return wrap(fn) if fn is not None else wrap


@dataclass
class ToolOutput:
    """What a tool returns to give the model images beside its text.

    ``images`` are dicts ``{"media_type": "image/png", "data": "<base64>", ...}`` (see :mod:`agentkernel.images`,
    which bounds their size); the text is what the guards, the panel and text-only APIs see, so it should say
    what each image is. The loop puts the images on the call's ``function_call_output`` item as ``"images"``.
    """

    text: str
    images: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ToolCall:
    """One requested call and, once it is done, its outcome.

    The arguments JSON is read once, when the call is made: ``normalized`` is the form the guards compare (keys
    sorted at every depth), ``argument_error`` why the text is not a JSON object.
    """

    call_id: str
    name: str
    arguments: str
    status: ToolStatus | None = None
    output: str = ""
    images: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """Images for the model beside the output, from a tool that returned a :class:`ToolOutput`."""
    duration: float = 0.0
    synthetic: bool = False
    started: float = field(default=0.0, repr=False)
    normalized: str = field(init=False, repr=False, compare=False)
    argument_error: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.normalized, self.argument_error = read_arguments(self.arguments)

    @property
    def failed(self) -> bool:
        return self.status == "error"


@dataclass(frozen=True)
class Decision:
    """An approver's answer with more to it than ``True`` / ``False``.

    ``Decision(approve=True, for_run=True)`` runs this call and every later call of the same tool in this run
    unasked (never in another run: each run, each ``%%agent`` cell, asks afresh). ``Decision(approve=False,
    note="use the parquet file instead")`` denies the call and sends the note to the model as its output, so the
    run goes on, steered. Only ``approve is True`` approves.
    """

    approve: bool
    for_run: bool = False
    note: str = ""


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


class ToolTimeout(Exception):
    """A tool ran past its own ``timeout`` (told apart from a ``TimeoutError`` the tool itself raised)."""


async def invoke(tool: Tool, kwargs: dict[str, Any], timeouts: Timeouts | None = None) -> Any:
    """Call a tool; a sync function runs in a worker thread of its own (see :func:`in_thread`).

    ``timeouts`` (a run's) watches the tool's timeout; without it, the call gets one of its own.
    """
    if timeouts is None:
        timeouts = Timeouts()
        try:
            return await invoke(tool, kwargs, timeouts)
        finally:
            timeouts.close()
    call: Awaitable[Any] = tool.fn(**kwargs) if tool.is_async else in_thread(tool.fn, kwargs, tool.name)
    if not tool.timeout:
        return await call
    # What asyncio.timeout() does, with a timer shared by the run's calls (see Timeouts).
    task = asyncio.current_task()
    assert task is not None
    before = task.cancelling()
    timeouts.watch(task, tool.timeout)
    try:
        result = await call
    except asyncio.CancelledError:
        if timeouts.release(task) and task.uncancel() <= before:  # our cancellation alone: the tool timed out
            raise ToolTimeout from None
        raise
    except BaseException:
        if timeouts.release(task):  # the tool turned our cancellation into an error of its own: that error stands
            task.uncancel()
        raise
    if timeouts.release(task):  # the tool swallowed our cancellation and returned: its result stands
        task.uncancel()
    return result


async def in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], name: str = "tool") -> Any:
    """Run ``fn(**kwargs)`` in a new daemon thread, in a copy of the caller's context (so prints land in the cell).

    Not ``asyncio.to_thread``: a thread abandoned after Stop or a deadline would hold the process open (the
    default executor's threads are joined when ``asyncio.run`` ends and again at exit). A daemon thread does not.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the call was cut off (Stop, timeout): nobody waits for it any more
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        result, error = None, None
        try:
            result = context.run(fn, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, which decides
            error = e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the event loop is closed: the run that wanted this result is over
            pass

    threading.Thread(target=work, name=f"agentkernel {name}", daemon=True).start()
    return await future


async def run_call(
    call: ToolCall,
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
    timeouts: Timeouts | None = None,
    approved: set[str] | None = None,
) -> None:
    """Run one call and fill in its status and output (cut to the tool's limit); never raises for a tool's failure.

    ``approved`` holds the names of the tools approved for the rest of the run: their calls are not asked about,
    and an approver's ``Decision(approve=True, for_run=True)`` adds to it.
    """
    call.started = time.monotonic()
    on_start(call)
    tool = tools.get(call.name)
    try:
        status, output = await _outcome(call, tool, tools, approve, timeouts, approved)
        if isinstance(output, ToolOutput):
            call.images, output = output.images, output.text
        limit = tool.max_output_chars if tool else MAX_OUTPUT_CHARS
        call.status, call.output = status, cut(output, limit) if limit else output
    finally:
        call.duration = time.monotonic() - call.started


async def _outcome(
    call: ToolCall, tool: Tool | None, tools: dict[str, Tool], approve: Approver | None, timeouts: Timeouts | None,
    approved: set[str] | None,
) -> tuple[ToolStatus, str | ToolOutput]:
    if tool is None:
        return "error", f"error: unknown tool {call.name!r}; available: {', '.join(tools)}"
    try:
        kwargs = _checked_arguments(tool, call)
    except ValueError as e:
        return "error", f"error: bad arguments for {call.name}: {e}"
    if not tool.read_only and (denial := await _denial(call, tool, approve, approved)):
        return "denied", denial
    try:
        value = await invoke(tool, kwargs, timeouts)
        return "ok", value if isinstance(value, ToolOutput) else format_output(value)
    except ToolTimeout:
        return "error", f"error: {call.name} timed out after {tool.timeout:g} s"
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the round is being stopped: let the cancellation through
            raise
        # Something inside the tool was cancelled, not the tool: that is the tool's own failure.
        return "error", f"error: {call.name} was cancelled"
    except TOOL_FAULTS as e:  # a tool's own failure is the model's to see, not the loop's to raise
        return "error", f"error: {_describe(e)}"


async def _denial(call: ToolCall, tool: Tool, approve: Approver | None, approved: set[str] | None) -> str | None:
    """Why a side-effecting call may not run, or None: only the bool True or an approving :class:`Decision` (or an
    awaitable of either) approves; a tool in ``approved`` is not asked about."""
    if approved is not None and tool.name in approved:
        return None
    why = f"denied: {call.name} has side effects and"
    if approve is None:
        return f"{why} no one is there to approve it"
    try:
        verdict = approve(call, tool)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except TOOL_FAULTS as e:
        return f"{why} the approval failed ({_describe(e)})"
    if isinstance(verdict, Decision):
        if verdict.approve is True:
            if verdict.for_run and approved is not None:
                approved.add(tool.name)
            return None
        if verdict.approve is False:
            note = str(verdict.note).strip()
            return f"denied by the user: {note}" if note else f"{why} the user denied it"
    if verdict is True:
        return None
    return f"{why} the user denied it" if verdict is False else f"{why} the approver answered {verdict!r}, not True"


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}): the tool tried to end the process"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def run_round(
    calls: list[ToolCall],
    tools: dict[str, Tool],
    approve: Approver | None,
    on_start: Callable[[ToolCall], None],
    on_finish: Callable[[ToolCall], None],
    timeouts: Timeouts | None = None,
    approved: set[str] | None = None,
) -> None:
    """Run a round's calls: read-only ones in parallel, then each side-effecting one alone, in request order.

    Each call's result is written into its own :class:`ToolCall`, so callers match by call_id whatever order
    the calls finish in. ``timeouts`` (the run's) watches the tools' timeouts; ``approved`` (the run's) names the
    tools approved for the rest of the run (see :func:`run_call`).
    """

    async def one(call: ToolCall) -> None:
        await run_call(call, tools, approve, on_start, timeouts, approved)
        on_finish(call)

    def side_effecting(call: ToolCall) -> bool:
        return call.name in tools and not tools[call.name].read_only

    parallel = [c for c in calls if not side_effecting(c)]
    if len(parallel) == 1:  # the usual round: awaited here, without gather's task and its event-loop passes
        await one(parallel[0])
    elif parallel:
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
