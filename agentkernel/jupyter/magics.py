"""``%%agent`` and ``%agent``: options, defaults from traitlets and the environment, and running a cell.

A ``%%agent`` cell is rewritten by :func:`agentkernel.jupyter.transform.rewrite_agent_cell` into a top-level
``await`` of :meth:`AgentMagics.run_async`, so the cell stays busy while the kernel still handles the Stop
button's click (ipykernel >= 7.4 dispatches comm messages while the shell awaits). With autoawait off the magic
runs the loop in a worker thread instead, and only the kernel interrupt can stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import display
from traitlets import Bool, Enum, Float, Int, List, Unicode

from ..events import Event
from ..file_tools import FILE_TOOL_NAMES, file_tools
from ..guards import GuardConfig
from ..loop import AgentLoop
from ..models.base import Model
from ..result import LoopResult
from ..stop import StopSignal
from ..tools import Approver, Tool, tool
from ..usage import Limits
from .errors import STOP_ERRORS, AgentConfigError, RunInterrupted
from .kernel_tools import KERNEL_TOOL_NAMES, KernelTools
from .panel import PANEL_TEXT, Panel
from .render import RunRecord, render_html, render_text

DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NO_MODEL = (
    "No model is configured: set OPENAI_API_KEY (and optionally AGENTKERNEL_MODEL or "
    "%config AgentMagics.model = '...'), point --base-url at an OpenAI-compatible server, "
    "or pass --model NAME where NAME is a model object in this notebook, e.g. "
    "my_model = agentkernel.ScriptedModel(['Hello!'])."
)


def _unquote(text: str | None) -> str | None:
    """IPython splits magic lines keeping quotes (``--system "be terse"``); take them off again."""
    if text and len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


@dataclass
class CellRun:
    """Everything one cell's run needs, prepared in the kernel's main thread before the loop starts."""

    loop: AgentLoop
    panel: Panel
    record: RunRecord
    prompt: str
    out: str | None
    kernel: KernelTools
    cells: bool = False
    interrupted: bool = False


@magics_class
class AgentMagics(Magics):
    """Run an agent loop inline in the kernel. Every option's default can be set with ``%config``."""

    model = Unicode("", help="Model name for the API, or the name of a model object in the user namespace "
                    "(default: $AGENTKERNEL_MODEL, else gpt-4.1-mini when OPENAI_API_KEY is set).").tag(config=True)
    api = Enum(["responses", "chat"], "responses", help="OpenAI Responses API or Chat Completions.").tag(config=True)
    base_url = Unicode("", help="OpenAI-compatible base URL (default: $OPENAI_BASE_URL).").tag(config=True)
    tools = List(Unicode(), default_value=[*FILE_TOOL_NAMES, *KERNEL_TOOL_NAMES],
                 help="Tool names: built-ins and @tool functions in the user namespace.").tag(config=True)
    max_iterations = Int(0, help="Model requests per run (0: no cap).").tag(config=True)
    max_tokens = Int(0, help="Total tokens per run (0: no cap).").tag(config=True)
    max_seconds = Float(0.0, help="Wall clock per run in seconds (0: no cap).").tag(config=True)
    max_tool_calls = Int(0, help="Tool calls per run (0: no cap).").tag(config=True)
    repeat_limit = Int(3, help="Stop when one call signature repeats this many times (0: off).").tag(config=True)
    root = Unicode("", help="Project root for the built-in file tools (default: the working directory).").tag(
        config=True)
    system = Unicode("", help="System prompt (default: agentkernel's bounded-loop prompt).").tag(config=True)
    allow_writes = Bool(False, help="Run side-effecting tools without asking.").tag(config=True)
    approval_timeout = Float(300.0, help="Seconds to wait for Approve/Deny before denying.").tag(config=True)
    transcripts = Bool(True, help="Append every run to a JSONL transcript ($AGENTKERNEL_TRANSCRIPTS or "
                       "~/.agentkernel/transcripts).").tag(config=True)
    stream_throttle = Float(0.1, help="Seconds between updates of the streamed text.").tag(config=True)

    # -- the magic -------------------------------------------------------------------------------------------

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("--model", "-m", help="model name, or the name of a model object in the notebook")
    @magic_arguments.argument("--api", choices=["responses", "chat"], help="OpenAI API flavour")
    @magic_arguments.argument("--base-url", help="OpenAI-compatible server URL")
    @magic_arguments.argument("--tools", help="comma-separated tool names (built-ins and @tool functions)")
    @magic_arguments.argument("--max-iterations", type=int, help="cap on model requests")
    @magic_arguments.argument("--max-tokens", type=int, help="cap on total tokens")
    @magic_arguments.argument("--max-seconds", type=float, help="cap on wall-clock seconds")
    @magic_arguments.argument("--max-tool-calls", type=int, help="cap on tool calls")
    @magic_arguments.argument("--repeat-limit", type=int, help="repeats of one call signature before stopping")
    @magic_arguments.argument("--root", help="project root for the built-in file tools")
    @magic_arguments.argument("--system", help="system prompt")
    @magic_arguments.argument("--continue", dest="resume", action="store_true",
                              help="go on from the previous run's history (_agent)")
    @magic_arguments.argument("--out", help="also store the LoopResult in this variable")
    @magic_arguments.argument("--allow-writes", action="store_true", help="run side-effecting tools unasked")
    @magic_arguments.argument("--record", help="save the model exchanges to this JSONL cassette")
    @magic_arguments.argument("--replay", help="play the model exchanges back from this cassette")
    @magic_arguments.argument("--no-expand", action="store_true",
                              help="send the prompt as written: no {expression} or $name expansion")
    @magic_arguments.argument("--cells", action="store_true",
                              help="put the code run_python ran into a new cell below when the run ends")
    @magic_arguments.argument("prompt", nargs="*", help="the prompt (for %%agent: the cell body)")
    @no_var_expand  # the prompt is expanded by the magic itself (unless --no-expand), the options never
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Run an LLM tool-use loop on the prompt, showing tool calls, streamed text and a Stop button.

        ``%%agent [options]`` takes the cell body as the prompt; ``%agent [options] prompt`` one line.
        After the run ``_agent`` holds the LoopResult. A guard or budget stop ends the cell with an error
        named for it (e.g. ``RepeatedToolCall``). In a notebook the cell is awaited so that Stop works while it
        runs; here (autoawait off) the loop runs in a worker thread and only the kernel interrupt stops it.
        """
        run = self.prepare(line, cell, clickable=False)
        context = contextvars.copy_context()  # so the worker thread's output lands in this cell
        done = threading.Event()
        failure: list[BaseException] = []

        def work() -> None:
            try:
                context.run(asyncio.run, run.loop.run(run.prompt))
            except BaseException as e:  # handed to the main thread, which raises it
                failure.append(e)
            finally:
                done.set()

        threading.Thread(target=work, name="agentkernel-run", daemon=True).start()
        while not done.is_set():
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                run.interrupted = True
                run.loop.stop.set("interrupted by the kernel interrupt")
        if failure:
            raise failure[0]
        self.finish(run)

    async def run_async(self, line: str, cell: str | None) -> None:
        """The awaited form of ``%%agent`` that the input transformer produces."""
        run = self.prepare(line, cell)
        ticker = asyncio.ensure_future(run.panel.tick())
        try:
            with self.interrupt_stops(run):
                await run.loop.run(run.prompt)
        finally:
            ticker.cancel()
            if run.loop.result is not None:
                self.publish(run, run.loop.result)
        self.finish(run)

    # -- preparing a run -------------------------------------------------------------------------------------

    def parse(self, line: str) -> Any:
        try:
            return magic_arguments.parse_argstring(self.agent, line)
        except UsageError as e:
            usage = self.agent.parser.format_usage().split("::", 1)[-1].strip()
            raise UsageError(f"{e}\nusage: {usage}") from None


    def prepare(self, line: str, cell: str | None, *, clickable: bool = True) -> CellRun:
        """Parse the options, resolve model and tools, and show the panel; raise AgentConfigError when unusable.

        ``clickable`` is False for the worker-thread fallback: a blocking cell gets no clicks until it ends, so
        Approve / Deny could never be answered there.
        """
        args = self.parse(line)
        prompt = cell.strip() if cell is not None else " ".join(args.prompt)
        if not prompt and not args.resume:
            raise UsageError("the prompt is empty: write it in the cell body below %%agent (or after %agent)")
        out = args.out
        if out is not None and not out.isidentifier():
            raise AgentConfigError(f"--out needs a variable name, not {out!r}")
        limits = Limits(
            max_iterations=self.pick(args.max_iterations, self.max_iterations) or None,
            max_tokens=self.pick(args.max_tokens, self.max_tokens) or None,
            max_seconds=self.pick(args.max_seconds, self.max_seconds) or None,
            max_tool_calls=self.pick(args.max_tool_calls, self.max_tool_calls) or None,
        )
        if not args.no_expand:
            prompt = self.expand(prompt)
        model = self.resolve_model(args)
        kernel = KernelTools(self.shell)
        tools = self.resolve_tools(args, kernel)
        history = self.previous_history() if args.resume else None
        stop = StopSignal()
        panel = Panel(limits, stop, throttle=self.stream_throttle)
        record = RunRecord()
        allow_writes = args.allow_writes or self.allow_writes
        loop = AgentLoop(
            model,
            tools=tools,
            system=_unquote(args.system) or self.system or None,
            history=history,
            limits=limits,
            guards=GuardConfig(repeat_limit=self.pick(args.repeat_limit, self.repeat_limit)),
            stop=stop,
            on_event=fan_out(panel, record, kernel),
            approve=self.approver(panel, allow_writes, clickable),
            transcript=self.transcripts,
        )
        bundle = panel.widget._repr_mimebundle_()
        bundle["text/plain"] = PANEL_TEXT  # a fixed text, so saved notebooks compare equal under nbval
        display(bundle, raw=True)
        kernel.on_displays = panel.show_displays
        return CellRun(loop=loop, panel=panel, record=record, prompt=prompt, out=out, kernel=kernel,
                       cells=args.cells)

    def expand(self, prompt: str) -> str:
        """``{expression}`` and ``$name`` replaced by IPython's rules for magic lines; a prompt with a field that does
        not evaluate (JSON, say) is left as written."""
        # var_expand also reads the locals of the frame `depth` levels up; past the top of the stack there is none,
        # so only the user namespace counts, as for a magic line at the top level of a cell.
        return str(self.shell.var_expand(prompt, depth=sys.getrecursionlimit()))

    @staticmethod
    def pick(option: Any, configured: Any) -> Any:
        return configured if option is None else option

    def resolve_model(self, args: Any) -> Model:
        if args.replay:
            from ..models.cassette import ReplayModel

            model: Model = ReplayModel(_unquote(args.replay))
        else:
            model = self.named_model(args)
        if args.record:
            from ..models.cassette import RecordingModel

            model = RecordingModel(model, _unquote(args.record))
        return model

    def named_model(self, args: Any) -> Model:
        name = _unquote(args.model) or self.model or os.environ.get("AGENTKERNEL_MODEL", "")
        found = self.shell.user_ns.get(name) if name else None
        if found is not None:
            if not callable(getattr(found, "stream", None)):
                raise AgentConfigError(f"{name!r} in the notebook is a {type(found).__name__}, not a model "
                                       "(it needs a stream(request) method, like agentkernel.ScriptedModel)")
            return found
        base_url = _unquote(args.base_url) or self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        if not os.environ.get("OPENAI_API_KEY") and not base_url:
            raise AgentConfigError(NO_MODEL if not name else
                                   f"Model {name!r} is not an object in this notebook and OPENAI_API_KEY is not set: "
                                   "set the key, give --base-url for a local server, or use a scripted model.")
        api = args.api or self.api
        if api == "chat":
            from ..models.openai_chat import OpenAIChatModel as cls
        else:
            from ..models.openai_responses import OpenAIResponsesModel as cls
        return cls(name or DEFAULT_OPENAI_MODEL, base_url=base_url)

    def resolve_tools(self, args: Any, kernel: KernelTools) -> list[Tool]:
        names = [n.strip() for n in _unquote(args.tools).split(",")] if args.tools is not None else self.tools
        root = _unquote(args.root) or self.root or None
        available = {t.name: t for t in [*file_tools(root), *kernel.tools]}
        tools: list[Tool] = []
        for name in filter(None, names):
            if name in self.shell.user_ns:
                found = self.shell.user_ns[name]
                if not callable(found):
                    raise AgentConfigError(f"tool {name!r} is a {type(found).__name__}, not a function or @tool")
                tools.append(found if isinstance(found, Tool) else tool(found))
            elif name in available:
                tools.append(available[name])
            else:
                raise AgentConfigError(f"unknown tool {name!r}: use a built-in ({', '.join(available)}) or the name "
                                       "of a function or @tool in this notebook")
        return tools

    def previous_history(self) -> list[dict[str, Any]]:
        previous = self.shell.user_ns.get("_agent")
        if not isinstance(previous, LoopResult):
            raise AgentConfigError("--continue needs a previous run: run a %%agent cell first (its result is _agent)")
        return previous.history

    def approver(self, panel: Panel, allow_writes: bool, clickable: bool = True) -> Approver | None:
        if allow_writes:
            return lambda call, tool: True
        if not clickable or os.environ.get("CI") or os.environ.get("AGENTKERNEL_NONINTERACTIVE"):
            return None  # nobody can click: side-effecting calls are denied and the model is told why
        return lambda call, tool: panel.approve(call, tool, self.approval_timeout or None)

    # -- ending a run ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def interrupt_stops(self, run: CellRun) -> Iterator[None]:
        """While the cell awaits, the first SIGINT stops the loop cleanly; a second one cancels as usual."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum: int, frame: Any) -> None:
            if run.interrupted:
                signal.signal(signal.SIGINT, previous)
                if callable(previous):
                    previous(signum, frame)
                return
            run.interrupted = True
            run.loop.stop.set("interrupted by the kernel interrupt")

        signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def publish(self, run: CellRun, result: LoopResult) -> None:
        result.executed_code = run.kernel.executed_code
        self.shell.user_ns["_agent"] = result
        if run.out:
            self.shell.user_ns[run.out] = result

    def finish(self, run: CellRun) -> None:
        """Store the result, leave the static rendering, and end the cell as the run's status says."""
        result = run.loop.result
        assert result is not None
        self.publish(run, result)
        display({
            # A widget view with an empty model id is hidden wherever ipywidgets renders, so the live user sees the
            # run once, in the panel; where widgets do not render (GitHub, nbviewer, nbconvert) the HTML shows.
            WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": ""},
            "text/html": render_html(result, run.record),
            "text/plain": render_text(result, run.record),
        }, raw=True)
        for image in run.kernel.images():  # run_python's figures, hidden the same way where the panel shows them
            display({WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": ""}, **image.data},
                    metadata=image.metadata, raw=True)
        if run.cells and result.executed_code:
            self.shell.set_next_input("\n\n".join(code.strip() for code in result.executed_code), replace=False)
        if run.interrupted:
            raise RunInterrupted("the agent run was interrupted; its history is kept in _agent") from None
        if result.status in STOP_ERRORS:
            raise STOP_ERRORS[result.status](result) from None


def fan_out(*listeners: Callable[[Event], None]) -> Callable[[Event], None]:
    def emit(event: Event) -> None:
        for listener in listeners:
            listener(event)

    return emit
