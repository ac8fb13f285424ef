"""A ``%%agent`` cell's life as plain functions of the kernel's state: parse the options, prepare the run, brief it
(what needs the event loop), launch it (its loop and panel), play it, publish its result, finish the cell and end
the panel.

The magics (:mod:`agentkernel.jupyter.magics`) only parse and hand off to :func:`run_awaited` (the cell rewritten
into an ``await`` by the input transformer, so that Stop works while it runs) or :func:`run_blocking` (autoawait
off: the loop runs in a worker thread and only the kernel interrupt stops it). Imported where a cell first runs, not
at ``%load_ext``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.display import DisplayHandle, display

from ..models.base import Model, accepts_images
from ..result import LoopResult
from ..secrets import KERNEL, SecretSet, marker
from ..stop import StopSignal
from .approvals import asks_on_terminal
from .errors import STOP_ERRORS, AgentConfigError, RunInterrupted
from .exits import exit_refused
from .options import AgentOptions, split_line, usage_line, wants_help
from .plan import RunPlan, RunTools

if TYPE_CHECKING:
    from ..gateway import RunBudget
    from ..instructions import Instruction
    from ..loop import AgentLoop
    from ..skills import Skills
    from .kernel.notebook_tools import NotebookTools
    from .kernel.tools import KernelTools
    from .kernel_state import KernelState
    from .panel import Panel

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PANEL_LEFT: dict[str, Any] = {}
"""What the record leaves of the panel's display: no data at all, an output JupyterLab, Notebook 7 and nbconvert
show as nothing (an empty ``text/plain`` showed as an empty output). The live display holds only the widget view,
which nbval skips, and nbval ignores the update, so it compares the saved notebook (the empty output, then the
record) with a fresh run equal."""


@dataclass(repr=False)  # shown as a LoopResult is (its _repr_pretty_), not as the dataclass repr
class CellResult(LoopResult):
    """The :class:`~agentkernel.LoopResult` of a ``%%agent`` cell (``_agent``), with the code its run ran."""

    executed_code: list[str] = field(default_factory=list, repr=False)
    """The code the notebook's ``run_python`` tool ran, in order."""

    def _summary_lines(self) -> list[str]:
        lines = super()._summary_lines()
        if self.executed_code:
            n = len(self.executed_code)
            lines.append(f"code run in the kernel: {n} piece{'s' * (n != 1)} in .executed_code")
        return lines


@dataclass
class CellSetup:
    """A cell's run before it starts: its plan, model, prompt (expanded) and tool sources."""

    plan: RunPlan
    model: Model
    prompt: str
    tools: RunTools
    history: list[dict[str, Any]] | None = None
    clickable: bool = True
    instructions: list[Instruction] = field(default_factory=list)
    skills: Skills | None = None


@dataclass
class CellRun:
    """Everything one cell's run needs, prepared in the kernel's main thread before the loop starts."""

    loop: AgentLoop
    panel: Panel
    prompt: str
    out: str | None
    kernel: KernelTools
    notebook: NotebookTools
    cells: bool = False
    cells_left: list[str] | None = None
    """With ``--cells``: the executed code the front end did not take as cells (None: not tried)."""
    interrupted: bool = False
    shown: DisplayHandle | None = None
    """The panel's display, emptied when the run ends (None where no panel is shown: a terminal or a console)."""
    background: bool = False
    """With ``--background``: the cell ends once the run has started (see :mod:`agentkernel.jupyter.background`)."""
    budget: RunBudget | None = None
    """The gateway key's budget, read before the run; ``footer`` says it after, below the record."""
    footer: str = ""


async def run_awaited(state: KernelState, line: str, cell: str | None) -> None:
    """A ``%%agent`` cell (or one-line ``%agent``) as the input transformer's ``await`` runs it: start, play,
    finish."""
    if shows_help(state, line, cell):
        return
    run = await start(state, line, cell)
    if run.background:
        state.background.start(state, run)
        return
    await play(state, run)
    finish(state, run)


def run_blocking(state: KernelState, line: str, cell: str | None) -> None:
    """A ``%%agent`` cell with autoawait off: the loop runs in a worker thread while the cell blocks, and the kernel
    interrupt stops it (no click reaches a blocking cell, so side-effecting calls are denied)."""
    if shows_help(state, line, cell):
        return
    with failed_start(state):
        options, prompt = parse(state, line, cell)
        if options.background:
            print(in_the_foreground("autoawait is off"))
        setup = prepare(state, options, prompt, clickable=False)
        if setup.tools.mcp.wanted:
            raise AgentConfigError("MCP servers run on the kernel's event loop, so a cell that uses them must be "
                                   "awaited: turn %autoawait on (the default in a notebook)")
        budget = gateway_budget(setup)
        run = launch(state, setup)
        if budget is not None:
            run.budget, run.panel.note = budget, budget.before.line()
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

    with exit_refused(state.shell):
        threading.Thread(target=work, name="agentkernel-run", daemon=True).start()
        while not done.is_set():
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                run.interrupted = True
                run.loop.stop.set(state.interrupt_reason())
    if failure:
        end_panel(run)
        raise failure[0]
    if run.budget is not None:
        run.footer = run.budget.after_line()
    finish(state, run)


async def start(state: KernelState, line: str, cell: str | None) -> CellRun:
    """Parse, prepare, start the MCP servers, brief and launch: the run ready to play, its panel shown. A cell that
    cannot start leaves ``_agent`` a ``fatal_error`` result (:func:`failed_start`)."""
    from .scheduler import RunTurns, scheduler_of

    with failed_start(state):
        options, prompt = parse(state, line, cell)
        background = options.background
        if background and (why := foreground_reason(state)):
            print(in_the_foreground(why))
            background = False
        setup = prepare(state, options, prompt)
        await setup.tools.start()
        await brief(setup)
        budget = await asyncio.to_thread(gateway_budget, setup)
        if background:
            from ..models.off_loop import OffLoopModel, reads_a_network

            if reads_a_network(setup.model):  # its stream goes on while a cell of the user's blocks the loop
                setup.model = OffLoopModel(setup.model)
        run = launch(state, setup)
        if budget is not None:
            run.budget, run.panel.note = budget, budget.before.line()
    run.background = background
    # A background run's calls that touch the kernel wait for the user's cells; a foreground run's are its cell's
    # own, and wait only for another run's call already running.
    run.panel.turns = run.loop.runner.turns = RunTurns(scheduler_of(state.shell), own_cell=not background,
                                                       changed=run.panel.schedule)
    return run


def foreground_reason(state: KernelState) -> str | None:
    """Why ``--background`` runs in the foreground here, or None: where nobody watches (headless, CI) nothing may be
    left running after the cell, and terminal IPython and consoles show no panel to come back to."""
    from .approvals import headless_runner, is_terminal, no_clicks_reason

    if is_terminal(state.shell):
        return "terminal IPython runs its event loop only while a cell runs"
    if asks_on_terminal(state.shell):
        return "a console shows no panel to come back to"
    return headless_runner(state.shell) or no_clicks_reason()


def in_the_foreground(why: str) -> str:
    """The one line a ``--background`` cell run in the foreground prints."""
    return f"agentkernel: --background runs in the foreground here: {why}. Its output stays in this cell."


async def play(state: KernelState, run: CellRun) -> None:
    """Run the loop to its end in the awaiting cell (the panel ticking, the first SIGINT a clean stop, ``exit()``
    refused); then publish its result (or, if the loop failed, end the panel) and write ``--cells``."""
    ticker = asyncio.ensure_future(run.panel.tick())
    try:
        with interrupt_stops(state, run), exit_refused(state.shell):
            await run.loop.run(run.prompt)
    finally:
        ticker.cancel()
        if run.loop.result is not None:
            publish(state, run, run.loop.result)
        else:  # the loop failed: no record, but no live panel left behind either
            end_panel(run)
    if run.budget is not None:
        run.footer = await run.budget.after()
    if run.cells:
        run.cells_left = await run.notebook.write_cells(run.kernel.executed_calls, run.loop.run_id)


@contextlib.contextmanager
def failed_start(state: KernelState) -> Iterator[None]:
    """A cell that cannot start leaves ``_agent`` a ``fatal_error`` LoopResult whose ``detail`` is the message
    (keeping the previous run's history, so ``--continue`` still goes on from it)."""
    try:
        yield
    except (AgentConfigError, UsageError) as e:
        previous = state.user_ns.get("_agent")
        history = previous.history if isinstance(previous, LoopResult) else []
        state.user_ns["_agent"] = LoopResult("fatal_error", None, history,
                                             detail=KERNEL.current.redact(str(e).split("\nusage:")[0]))
        raise


def shows_help(state: KernelState, line: str, cell: str | None) -> bool:
    """Page the help (what ``%%agent?`` shows) when the options ask for it (``--help``, ``-h``): nothing runs."""
    try:
        words, _ = split_line(line, cell is not None)
    except UsageError:  # said when the line is parsed
        return False
    if wants_help(words):
        from IPython.core.page import page

        page(state.settings.agent.__doc__)  # a notebook shows it where it shows %%agent?'s
    return wants_help(words)


def parse(state: KernelState, line: str, cell: str | None) -> tuple[AgentOptions, str]:
    """The cell's options (command line > ``%config`` > environment > default) and its prompt; the option line is
    expanded (``{expression}``, ``$name``) as IPython expands a magic line (the prompt too, later: see
    :func:`expand_prompt`) unless ``--no-expand`` is given or ``%config AgentMagics.expand = False``."""
    try:
        words, rest = split_line(line, cell is not None)
        if "--no-expand" not in words and state.settings.expand:
            if cell is not None or not rest:  # a %%agent line is all options
                words, rest = split_line(state.expand_text(line), cell is not None)
            else:  # the one-line %agent's prompt is expanded with any prompt, when the run is prepared
                words, _ = split_line(state.expand_text(line.rstrip()[:-len(rest)]))
        args = state.parser.parse_args(words)
        if args.mcp_prompt and rest:  # the prompt's NAME=VALUE arguments follow it on the line
            from .mcp_servers import prompt_arguments

            arguments, rest = prompt_arguments(rest)
            args.mcp_prompt = " ".join([args.mcp_prompt, *arguments])
        if cell is not None and rest:
            raise UsageError(f"%%agent takes its prompt from the cell body; {rest!r} is not an option")
    except UsageError as e:
        raise UsageError(usage_line(e)) from None
    return state.merge(args), (cell if cell is not None else rest).strip()


def prepare(state: KernelState, options: AgentOptions, prompt: str, *, clickable: bool = True) -> CellSetup:
    """The cell's plan, model and tool sources (its ``--tools`` resolved, its MCP servers not yet started); raise
    AgentConfigError when unusable.

    ``clickable`` is False for the worker-thread fallback: a blocking cell gets no clicks until it ends, so
    Approve / Deny could never be answered there.
    """
    if not prompt and options.resume is None and not options.mcp_prompt:
        raise UsageError("the prompt is empty: write it in the cell body below %%agent (or after %agent)")
    if options.replay and options.record:
        raise UsageError("--record and --replay cannot be used together: record a run from a live model, then replay "
                         "that cassette")
    plan = RunPlan.of(options)
    model = plan.model(state.user_ns)
    secrets = KERNEL.configure(keys=plan.keys(model), env_names=options.secret_env)
    state.note_short(options.secret_env)
    if options.expand:
        prompt = expand_prompt(state, prompt, secrets)
    model_images = accepts_images(model) if options.images is None else options.images
    tools = run_tools(state, plan, model_images, clickable)
    history = plan.history(state.user_ns)
    folder = os.getcwd()  # the notebook's folder, as the front ends start its kernel there
    skills = plan.skills(folder)
    # the tagged cells from the saved file, unless the front end gives them live (brief, on the event loop)
    saved = options.instructions and not tools.notebook.reads_live()
    instructions = plan.instructions(folder, tools.notebook.saved_instructions() if saved else None)
    for problem in plan.problems:  # a skill or an instruction file left out
        state.note(problem)
    return CellSetup(plan, model, prompt, tools, history, clickable, instructions, skills)


def expand_prompt(state: KernelState, prompt: str, secrets: SecretSet | None = None) -> str:
    """The prompt expanded (:meth:`KernelState.expand_text`). A secret the expanded prompt holds is sent as its
    marker, and a line in the cell says so."""
    expanded = state.expand_text(prompt)
    redacted = (secrets or KERNEL.current).redact(expanded, shapes=False)
    if redacted != expanded:
        shown = [name for name in (secrets or KERNEL.current).names if marker(name) in redacted]
        print(f"agentkernel: the prompt holds the secret {', '.join('$' + n for n in shown)}: the model is sent "
              f"{', '.join(marker(n) for n in shown)} instead, and its code can use the value by name")
    return redacted


def run_tools(state: KernelState, plan: RunPlan, model_images: bool, live: bool = True) -> RunTools:
    """This cell's kernel and notebook tools, and the plan's ``--tools`` resolved against every source."""
    from .kernel.notebook import ExecuteRequest
    from .kernel.notebook_tools import NotebookTools
    from .kernel.tools import KernelTools

    kernel = KernelTools(state.shell, images=model_images)
    notebook = NotebookTools(state.shell, ExecuteRequest.of(state.shell), kernel.input_history, live=live)
    return plan.tools(state.user_ns, kernel, notebook, state.mcp_servers, model_images=model_images)


def gateway_budget(setup: CellSetup) -> RunBudget | None:
    """The gateway key's budget (read once before the run), the run's ``max_cost`` capped by what it has left when
    the model's price is known (else the gateway holds its budget alone); None when the model's server is no gateway
    that tells it (:mod:`agentkernel.gateway`)."""
    from ..gateway import RunBudget
    from ..pricing import price_for

    budget = RunBudget.read(setup.model)
    if budget is not None and price_for(setup.model, setup.plan.price) is not None:
        setup.plan.limits = budget.cap(setup.plan.limits)
    return budget


async def brief(setup: CellSetup) -> None:
    """What needs the kernel's event loop before the run: the notebook's tagged cells as the front end has them,
    and an MCP server's prompt (``--prompt``) as the cell's prompt, the cell body after it."""
    options = setup.plan.options
    if options.instructions and setup.tools.notebook.reads_live():
        if (cells := await setup.tools.notebook.live_instructions()) is not None:
            setup.instructions.append(cells)  # the nearest source: after the files
    if options.mcp_prompt:
        text = KERNEL.current.redact(await setup.tools.mcp.prompt_text())
        setup.prompt = f"{text}\n\n{setup.prompt}" if setup.prompt else text


def launch(state: KernelState, setup: CellSetup) -> CellRun:
    """The run's loop, with the cell's panel shown (where a widget front end shows it)."""
    from ..listeners.tracing import RunSpans, export_trouble
    from ..listeners.tracing import wanted as tracing_wanted
    from ..loop import AgentLoop
    from .panel import Panel

    plan, options = setup.plan, setup.plan.options
    stop = StopSignal()
    if (tracing := tracing_wanted(options.tracing)) and (trouble := export_trouble()):
        state.note(trouble)  # (the earlier runs' spans: they are exported in the background)
    panel = Panel(plan.limits, stop, throttle=options.stream_throttle)
    notebook = setup.tools.notebook
    nobody = state.nobody_answers(setup.clickable)
    approve = plan.approver(panel, nobody=nobody, terminal=nobody is None and asks_on_terminal(state.shell),
                            notebook=notebook, untrusted=setup.tools.mcp.untrusted())
    loop = AgentLoop(
        setup.model,
        tools=setup.tools.tools(),
        system=options.system or None,
        history=setup.history,
        limits=plan.limits,
        guards=plan.guards,
        stop=stop,
        on_event=[panel, *([RunSpans(setup.model)] if tracing else [])],
        approve=approve,
        transcript=plan.transcript_folder(),
        context_window=options.context_window or None,
        price=plan.price,
        instructions=setup.instructions,
        skills=setup.skills,
    )
    tell_transcripts(state, loop, panel)
    run = CellRun(loop=loop, panel=panel, prompt=setup.prompt, out=options.out, kernel=setup.tools.kernel,
                  notebook=notebook, cells=options.cells)
    if not asks_on_terminal(state.shell):  # a terminal or a console shows no widget: it gets the record only
        show_panel(state, run)
    return run


def tell_transcripts(state: KernelState, loop: AgentLoop, panel: Panel) -> None:
    """Say once per kernel where runs are saved: the panel's note (live only: paths differ by machine), or on a
    terminal or a console, which show no panel, one printed line before the run."""
    from ..listeners.transcript import KEEP

    if loop.transcript and not state.told_transcripts:
        state.told_transcripts = True
        folder, home = str(loop.transcript.path.parent), os.path.expanduser("~")
        shown = "~" + folder[len(home):] if folder.startswith(home + os.sep) else folder
        said = f"runs are saved in {shown} (the newest {KEEP} kept; --no-transcript: none)"
        if asks_on_terminal(state.shell):
            state.note(said)
        else:
            panel.note = said


def show_panel(state: KernelState, run: CellRun) -> None:
    """Display the run's panel in the cell, and its Undo button from the run's first change of the notebook."""
    from .kernel.undo import live_button

    bundle = {WIDGET_VIEW: run.panel.widget._repr_mimebundle_()[WIDGET_VIEW]}  # no text/plain: see PANEL_LEFT
    run.shown = display(bundle, raw=True, display_id=True)
    notebook, panel = run.notebook, run.panel
    notebook.on_change = lambda changes: panel.add_action(live_button(state.shell, changes, notebook.request.session))


@contextlib.contextmanager
def interrupt_stops(state: KernelState, run: CellRun) -> Iterator[None]:
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
        run.loop.stop.set(state.interrupt_reason())

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def publish(state: KernelState, run: CellRun, result: LoopResult) -> CellResult:
    """``result`` made the cell's :class:`CellResult`, stored in ``_agent`` (and in ``--out``'s name); it holds
    markers, as every view of the run does."""
    result = run.loop.listeners.told_result(result)  # _agent holds markers, as every view of the run does
    published = CellResult(**{f.name: getattr(result, f.name) for f in fields(LoopResult)},
                           executed_code=[KERNEL.current.redact(code) for code in run.kernel.executed_code])
    state.user_ns["_agent"] = published
    if run.out:
        state.user_ns[run.out] = published
    return published


def finish(state: KernelState, run: CellRun) -> None:
    """Store the result, replace the live panel with the run's record, and end the cell as the run's status says."""
    from .render import record_bundle

    assert run.loop.result is not None
    result = publish(state, run, run.loop.result)
    display(record_bundle(result, run.panel.timeline), raw=True)
    if run.footer:
        print(f"agentkernel: {run.footer}")
    from .kernel.undo import record_output

    if (button := record_output(state.shell, run.loop.run_id, run.notebook.changes)) is not None:
        display(button.data, metadata=button.metadata, raw=True)  # the extension's Undo button
    end_panel(run)
    # ONE next input (a front end shows one): the cells add_cell queued where no extension answers, and the code
    # --cells could not write as cells
    left = run.cells_left if run.cells_left is not None else result.executed_code if run.cells else []
    if text := run.notebook.next_input(left):
        state.shell.set_next_input(text, replace=False)
    if run.interrupted:
        raise RunInterrupted("the agent run was interrupted; its history is kept in _agent") from None
    if result.status in STOP_ERRORS:
        raise STOP_ERRORS[result.status](result) from None


def end_panel(run: CellRun) -> None:
    """The panel's display emptied (the record below it replaces it, or the run failed) and its widgets closed: a
    saved notebook holds no view of a dead widget model, and the kernel no widget of a finished run."""
    if run.shown is not None:
        run.shown.update(PANEL_LEFT, raw=True)
        run.shown = None
    run.panel.close()
