"""``%%agent`` and ``%agent``: preparing a cell's run from its options, running it, and ending the cell.

The options, their ``%config AgentMagics`` traits and their help are declared once in
:mod:`agentkernel.jupyter.options`.

A ``%%agent`` cell is rewritten by :func:`agentkernel.jupyter.transform.rewrite_agent_cell` into a top-level
``await`` of :meth:`AgentMagics.run_async`, so the cell stays busy while the kernel still handles the Stop
button's click (ipykernel >= 7.4 dispatches comm messages while the shell awaits). With autoawait off the magic
runs the loop in a worker thread instead, and only the kernel interrupt can stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.display import DisplayHandle, display

from ..models.base import Model, accepts_images
from ..models.providers import resolve, split_model
from ..result import LoopResult
from ..secrets import KERNEL, MIN_SECRET_CHARS, SecretSet, marker
from ..stop import StopSignal
from .approvals import asks_on_terminal, headless_runner, is_terminal, no_clicks_reason
from .errors import STOP_ERRORS, AgentConfigError, RunInterrupted
from .exits import exit_refused
from .options import AgentOptions, merge, option_arguments, option_traits, split_line, usage_line, wants_help

if TYPE_CHECKING:  # the run's parts are imported where a cell first uses them, so that %load_ext stays cheap
    from ..gateway import RunBudget
    from ..instructions import Instruction
    from ..loop import AgentLoop
    from ..skills import Skills
    from .kernel.notebook_tools import NotebookTools
    from .kernel.tools import KernelTools
    from .mcp_servers import KernelServers
    from .panel import Panel
    from .plan import RunPlan, RunTools
    from .serve import KernelServing

DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PANEL_TEXT = ""
"""The panel's text, live and once the record replaced it: empty, the same in both, so nbval (which ignores
display updates) compares the saved notebook with a fresh run equal."""
NO_MODEL = (
    "No model is configured: set OPENAI_API_KEY (and optionally AGENTKERNEL_MODEL or "
    "%config AgentMagics.model = '...'), point --base-url at an OpenAI-compatible server, "
    "or pass --model NAME where NAME is a model object in this notebook, e.g. "
    "my_model = agentkernel.ScriptedModel(['Hello!'])."
)


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
    budget: RunBudget | None = None
    """The gateway key's budget, read before the run; ``footer`` says it after."""
    footer: str = ""


@magics_class
class AgentMagics(Magics):
    """Run an agent loop inline in the kernel. Every option's default can be set with ``%config``."""

    locals().update(option_traits())  # model, api, max_iterations, ...: one traitlet per row of the options table
    expand: bool  # one of them, read before the options are merged

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell, **kwargs)
        self.noted: set[tuple[str, str | None]] = set()
        self.told_transcripts = False

    @functools.cached_property
    def mcp_servers(self) -> KernelServers:
        """The kernel's MCP servers, kept from the first cell that uses them to the kernel's end."""
        from .mcp_servers import KernelServers

        return KernelServers()

    @functools.cached_property
    def serving(self) -> KernelServing:
        """The kernel's served session (``%agent_serve``)."""
        from .serve import KernelServing

        return KernelServing()

    # -- the magic -------------------------------------------------------------------------------------------

    @option_arguments
    @no_var_expand  # the magic expands the prompt itself (unless --no-expand), and never the options
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Run an LLM tool-use loop on the prompt, showing tool calls, streamed text and a Stop button.

        ``%%agent [options]`` takes the cell body as the prompt; ``%agent [options] prompt`` one line.
        After the run ``_agent`` holds the LoopResult. A guard or budget stop ends the cell with an error
        named for it (e.g. ``RepeatedToolCall``). In a notebook the cell is awaited so that Stop works while it
        runs; with `%autoawait off` the loop runs in a worker thread and only the kernel interrupt stops it.
        """
        if self.shows_help(line, cell):
            return
        with self.failed_start():
            options, prompt = self.parse(line, cell)
            setup = self.prepare(options, prompt, clickable=False)
            if setup.tools.mcp.wanted:
                raise AgentConfigError("MCP servers run on the kernel's event loop, so a cell that uses them must be "
                                       "awaited: turn %autoawait on (the default in a notebook)")
            run = self.launch(setup)
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

        with exit_refused(self.shell):
            threading.Thread(target=work, name="agentkernel-run", daemon=True).start()
            while not done.is_set():
                try:
                    done.wait(0.1)
                except KeyboardInterrupt:
                    run.interrupted = True
                    run.loop.stop.set(self.interrupt_reason())
        if failure:
            self.end_panel(run)
            raise failure[0]
        self.finish(run)

    async def run_async(self, line: str, cell: str | None) -> None:
        """The awaited form of ``%%agent`` that the input transformer produces."""
        if self.shows_help(line, cell):
            return
        with self.failed_start():
            options, prompt = self.parse(line, cell)
            setup = self.prepare(options, prompt)
            await setup.tools.start()
            await self.brief(setup)
            budget = await self.gateway_budget(setup)
            run = self.launch(setup)
            if budget is not None:
                run.budget, run.panel.note = budget, budget.before.line()
        ticker = asyncio.ensure_future(run.panel.tick())
        try:
            with self.interrupt_stops(run), exit_refused(self.shell):
                await run.loop.run(run.prompt)
        finally:
            ticker.cancel()
            if run.loop.result is not None:
                self.publish(run, run.loop.result)
            else:  # the loop failed: no record, but no live panel left behind either
                self.end_panel(run)
        if run.budget is not None:
            run.footer = await run.budget.after()
        if run.cells:
            run.cells_left = await run.notebook.write_cells(run.kernel.executed_calls, run.loop.run_id)
        self.finish(run)

    @line_magic
    def agent_secret(self, line: str) -> None:
        """Keep the value of an environment variable or notebook variable from the model: ``%agent_secret NAME``
        (several names may follow). The model, the panel, transcripts and cassettes see ``[secret $NAME]``; the
        value stays usable by name in the kernel. Alone, ``%agent_secret`` lists the names kept secret (never the
        values)."""
        names = line.split()
        if not names:
            secret_env = self.parse("", None)[0].secret_env
            self.note_short(secret_env)
            secrets = KERNEL.configure(env_names=secret_env)
            listed = ", ".join(sorted(secrets.names)) or "none"
            print(f"secrets kept from the model ({len(secrets.names)}): {listed}")
            return
        for name in names:
            print(self.name_secret(name))

    def name_secret(self, name: str) -> str:
        """Add the environment or notebook variable ``name`` to the kernel's secrets; what became of it."""
        if name in os.environ:
            value: object = os.environ[name]
            read: Callable[[], object] = lambda: os.environ.get(name)  # noqa: E731 - read again at each run
            where = "environment variable"
        elif name in self.user_ns:
            value, read, where = self.user_ns[name], lambda: self.user_ns.get(name), "notebook variable"
        else:
            raise UsageError(f"%agent_secret {name}: there is no environment variable or notebook variable {name}")
        if not isinstance(value, str):
            raise UsageError(f"%agent_secret {name}: the {where} {name} is a {type(value).__name__}, not a string")
        KERNEL.name(name, read)
        if len(value) < MIN_SECRET_CHARS:
            return (f"the {where} {name} is shorter than {MIN_SECRET_CHARS} characters: it is not treated as a "
                    "secret (it would be replaced wherever those characters occur)")
        return f"the {where} {name} is kept secret: the model sees {marker(name)}"

    @line_magic
    def agent_serve(self, line: str) -> None:
        """``%agent_serve [options]``: serve this kernel's tools over MCP (Streamable HTTP on 127.0.0.1, a bearer
        token) to an outside agent such as Claude Code, Codex, Gemini CLI or VS Code, until ``%agent_serve stop``.

        The options are ``%%agent``'s (``--tools``, ``--root``, ``--mcp``, ``--allow-writes``, ``--max-tool-calls``,
        ``--max-seconds``, the guards...) and ``--port N`` (else a free port). Every call goes through the same
        approvals, redaction and guards as a ``%%agent`` call; the panel shows each call, asks there, and its Stop
        ends the running call and the session. ``_agent_serve`` holds the session: ``url``, ``headers`` (what a
        client sends) and ``calls``. It must be alone in its cell (it is awaited there, on the kernel's loop).
        """
        raise UsageError(f"%agent_serve {line.strip()} must be alone in its cell, with autoawait on (the default in "
                         "a notebook): the server runs on the kernel's event loop")

    async def agent_serve_async(self, line: str) -> None:
        """The awaited form of ``%agent_serve`` that the input transformer produces."""
        if is_terminal(self.shell):
            raise UsageError("%agent_serve needs a Jupyter kernel: terminal IPython runs its event loop only while a "
                             "cell runs, so a server started there would not answer between cells")
        from .plan import RunPlan
        from .serve import SERVE_TEXT, port_option

        port, line = port_option(self.expand_text(line) if self.expand else line)
        words, rest = split_line(line)
        if rest.strip() == "stop" and not words:
            print(await self.serving.stop())
            return
        if rest.strip():
            raise UsageError(f"%agent_serve takes options (those of %%agent, and --port N), or stop; not {rest!r}")
        try:
            options = merge(self.agent.parser.parse_args(words), self)
        except UsageError as e:
            raise UsageError(f"%agent_serve: {e} (%%agent? lists the options)") from None
        plan = RunPlan.of(options)
        plan.policy.check_serve()
        KERNEL.configure(keys=self.configured_keys(options, None), env_names=options.secret_env)
        self.note_short(options.secret_env)
        tools = self.run_tools(plan, model_images=True)
        nobody = self.nobody_answers()
        served = await self.serving.start(plan, tools, port=port, nobody=nobody, shell=self.shell)
        self.user_ns["_agent_serve"] = served
        bundle = served.panel.view._repr_mimebundle_()
        bundle["text/plain"] = SERVE_TEXT  # fixed, and without the token: the snippets live in widget state
        served.shown = display(bundle, raw=True, display_id=True)
        if nobody:
            print(f"agentkernel: side-effecting calls are denied at once ({nobody}); --allow-writes runs them")

    @line_magic
    def agent_policy(self, line: str) -> None:
        """``%agent_policy``: the administrator's policy in force (``agentkernel_policy.json`` in Jupyter's system
        and environment config folders: ceilings on cost, time and tool calls, the models, tools and MCP servers
        allowed, serving, writes, transcripts), each rule with the file it came from."""
        from .policy import Policy

        print(Policy.load().describe())

    @line_magic
    def agent_mcp(self, line: str) -> None:
        """``%agent_mcp [--mcp-config PATH] [list|restart NAME|stop NAME]``: list the configured MCP servers (of
        PATH, else ``$AGENTKERNEL_MCP_CONFIG`` or ``.mcp.json``), whether each runs, and its tools; ``restart NAME``
        and ``stop NAME`` restart or stop one.

        Alone in a cell it is awaited on the kernel's event loop; elsewhere it can only list.
        """
        from .mcp_servers import MCP_USAGE

        words, config = self.mcp_words(line)
        if words:
            raise UsageError(f"%agent_mcp {line.strip()} must be alone in its cell (it is awaited there)\n{MCP_USAGE}")
        print(self.mcp_servers.listing_for(config))

    async def agent_mcp_async(self, line: str) -> None:
        """The awaited form of ``%agent_mcp`` that the input transformer produces."""
        words, config = self.mcp_words(line)
        print(await self.mcp_servers.command(words, config))

    def mcp_words(self, line: str) -> tuple[list[str], str]:
        """``%agent_mcp``'s words without ``--mcp-config PATH`` (and a ``list``, the default), and the configuration
        to read: PATH, else the one ``%%agent`` reads."""
        from .mcp_servers import MCP_USAGE

        words, rest = split_line(self.shell.var_expand(line, depth=sys.getrecursionlimit()) if self.shell else line)
        try:
            args = self.agent.parser.parse_args(words)
        except UsageError as e:
            raise UsageError(f"%agent_mcp {line.strip()}: {e}\n{MCP_USAGE}") from None
        if any(value is not None for name, value in vars(args).items() if name != "mcp_config"):
            raise UsageError(f"%agent_mcp takes only --mcp-config PATH as an option\n{MCP_USAGE}")
        action = rest.split()
        return (action[1:] if action[:1] == ["list"] else action), args.mcp_config or merge(args, self).mcp_config

    @line_magic
    def agent_undo(self, line: str) -> None:
        """``%agent_undo [RUN_ID]``: take back the notebook changes of a run (by default the last run that changed
        the notebook) in one step: the cells it added are removed, the cells it edited get their source back. A cell
        changed since the run wrote it is left as it is and named. Works in JupyterLab and Notebook 7 with
        agentkernel's extension, alone in its cell (it is awaited while the front end answers); elsewhere it says
        why it cannot."""
        assert self.shell is not None
        why = "%autoawait is off (%autoawait on lets it wait)" if not self.shell.autoawait else \
            "%agent_undo must be alone in its cell, which is then awaited"
        print(f"cannot undo here: the front end's answers arrive only while the cell awaits, and {why}")

    async def agent_undo_async(self, line: str) -> None:
        """The awaited form of ``%agent_undo`` that the input transformer produces."""
        from .kernel.undo import undo_line

        print(await undo_line(self.shell, line))

    @contextlib.contextmanager
    def failed_start(self) -> Iterator[None]:
        """A cell that cannot start leaves ``_agent`` a ``fatal_error`` LoopResult whose ``detail`` is the message
        (keeping the previous run's history, so ``--continue`` still goes on from it)."""
        try:
            yield
        except (AgentConfigError, UsageError) as e:
            previous = self.user_ns.get("_agent")
            history = previous.history if isinstance(previous, LoopResult) else []
            self.user_ns["_agent"] = LoopResult("fatal_error", None, history, detail=str(e).split("\nusage:")[0])
            raise

    # -- preparing a run -------------------------------------------------------------------------------------

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace (a registered magic always has its shell)."""
        assert self.shell is not None, "AgentMagics is used inside an IPython shell"
        return self.shell.user_ns

    def shows_help(self, line: str, cell: str | None) -> bool:
        """Print the help (what ``%%agent?`` shows) when the options ask for it (``--help``, ``-h``)."""
        try:
            words, _ = split_line(line, cell is not None)
        except UsageError:  # said when the line is parsed
            return False
        if wants_help(words):
            from IPython.core.page import page

            page(self.agent.__doc__)  # a notebook shows it where it shows %%agent?'s
        return wants_help(words)

    def parse(self, line: str, cell: str | None) -> tuple[AgentOptions, str]:
        """The cell's options (command line > ``%config`` > environment > default) and its prompt; the option line
        is expanded (``{expression}``, ``$name``) as IPython expands a magic line (the prompt too, later: see
        :meth:`expand_prompt`) unless ``--no-expand`` is given or ``%config AgentMagics.expand = False``."""
        try:
            words, rest = split_line(line, cell is not None)
            if "--no-expand" not in words and self.expand:
                if cell is not None or not rest:  # a %%agent line is all options
                    words, rest = split_line(self.expand_text(line), cell is not None)
                else:  # the one-line %agent's prompt is expanded with any prompt, when the run is prepared
                    words, _ = split_line(self.expand_text(line.rstrip()[:-len(rest)]))
            args = self.agent.parser.parse_args(words)
            if args.mcp_prompt and rest:  # the prompt's NAME=VALUE arguments follow it on the line
                from .mcp_servers import prompt_arguments

                arguments, rest = prompt_arguments(rest)
                args.mcp_prompt = " ".join([args.mcp_prompt, *arguments])
            if cell is not None and rest:
                raise UsageError(f"%%agent takes its prompt from the cell body; {rest!r} is not an option")
        except UsageError as e:
            raise UsageError(usage_line(e)) from None
        return merge(args, self), (cell if cell is not None else rest).strip()

    def prepare(self, options: AgentOptions, prompt: str, *, clickable: bool = True) -> CellSetup:
        """The cell's plan, model and tool sources (its ``--tools`` resolved, its MCP servers not yet started);
        raise AgentConfigError when unusable.

        ``clickable`` is False for the worker-thread fallback: a blocking cell gets no clicks until it ends, so
        Approve / Deny could never be answered there.
        """
        if not prompt and options.resume is None and not options.mcp_prompt:
            raise UsageError("the prompt is empty: write it in the cell body below %%agent (or after %agent)")
        from .plan import RunPlan

        plan = RunPlan.of(options)
        model = self.resolve_model(options)
        secrets = KERNEL.configure(keys=self.configured_keys(options, model), env_names=options.secret_env)
        self.note_short(options.secret_env)
        if options.expand:
            prompt = self.expand_prompt(prompt, secrets)
        model_images = accepts_images(model) if options.images is None else options.images
        tools = self.run_tools(plan, model_images, clickable)
        history = self.previous_history(options.resume) if options.resume is not None else None
        folder = os.getcwd()  # the notebook's folder, as the front ends start its kernel there
        skills = plan.skills(folder)
        # the tagged cells from the saved file, unless the front end gives them live (brief, on the event loop)
        saved = options.instructions and not tools.notebook.reads_live()
        instructions = plan.instructions(folder, tools.notebook.saved_instructions() if saved else None)
        for problem in plan.problems:  # a skill or an instruction file left out
            self.note(problem)
        return CellSetup(plan, model, prompt, tools, history, clickable, instructions, skills)

    async def brief(self, setup: CellSetup) -> None:
        """What needs the kernel's event loop before the run: the notebook's tagged cells as the front end has them,
        and an MCP server's prompt (``--prompt``) as the cell's prompt, the cell body after it."""
        options = setup.plan.options
        if options.instructions and setup.tools.notebook.reads_live():
            if (cells := await setup.tools.notebook.live_instructions()) is not None:
                setup.instructions.append(cells)  # the nearest source: after the files
        if options.mcp_prompt:
            text = KERNEL.current.redact(await setup.tools.mcp.prompt_text())
            setup.prompt = f"{text}\n\n{setup.prompt}" if setup.prompt else text

    @staticmethod
    async def gateway_budget(setup: CellSetup) -> RunBudget | None:
        """The gateway key's budget (read once before the run), the run's ``max_cost`` capped by what it has left
        when the model's price is known (else the gateway holds its budget alone); None when the model's server is
        no gateway that tells it."""
        from ..gateway import RunBudget
        from ..pricing import price_for

        budget = await RunBudget.of(setup.model)
        if budget is not None and price_for(setup.model, setup.plan.price) is not None:
            setup.plan.limits = budget.cap(setup.plan.limits)
        return budget

    def run_tools(self, plan: RunPlan, model_images: bool, live: bool = True) -> RunTools:
        """This cell's kernel and notebook tools, and the plan's ``--tools`` resolved against every source."""
        from .kernel.notebook import ExecuteRequest
        from .kernel.notebook_tools import NotebookTools
        from .kernel.tools import KernelTools

        kernel = KernelTools(self.shell, images=model_images)
        notebook = NotebookTools(self.shell, ExecuteRequest.of(self.shell), kernel.input_history, live=live)
        return plan.tools(self.user_ns, kernel, notebook, self.mcp_servers, model_images=model_images)

    def launch(self, setup: CellSetup) -> CellRun:
        """The run's loop, with the cell's panel shown."""
        from ..loop import AgentLoop
        from ..record.transcript import KEEP
        from ..tracing import RunSpans, export_trouble
        from ..tracing import wanted as tracing_wanted
        from .kernel.undo import live_button
        from .panel import Panel

        plan, options = setup.plan, setup.plan.options
        stop = StopSignal()
        if (tracing := tracing_wanted(options.tracing)) and (trouble := export_trouble()):
            self.note(trouble)  # (the earlier runs' spans: they are exported in the background)
        panel = Panel(plan.limits, stop, throttle=options.stream_throttle)
        notebook = setup.tools.notebook
        nobody = self.nobody_answers(setup.clickable)
        approve = plan.approver(panel, nobody=nobody, terminal=nobody is None and asks_on_terminal(self.shell),
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
            transcript=transcript_folder(options.transcripts),
            context_window=options.context_window or None,
            price=plan.price,
            instructions=setup.instructions,
            skills=setup.skills,
        )
        if loop.transcript and not self.told_transcripts:  # once per kernel, live only (paths differ by machine)
            self.told_transcripts = True
            folder, home = str(loop.transcript.path.parent), os.path.expanduser("~")
            shown = "~" + folder[len(home):] if folder.startswith(home + os.sep) else folder
            panel.note = f"runs are saved in {shown} (the newest {KEEP} kept; --no-transcript: none)"
        run = CellRun(loop=loop, panel=panel, prompt=setup.prompt, out=options.out, kernel=setup.tools.kernel,
                      notebook=notebook, cells=options.cells)
        if not asks_on_terminal(self.shell):  # a terminal or a console shows no widget: it gets the record only
            bundle = {WIDGET_VIEW: panel.widget._repr_mimebundle_()[WIDGET_VIEW], "text/plain": PANEL_TEXT}
            run.shown = display(bundle, raw=True, display_id=True)
            # the Undo button, from the run's first change of the notebook
            notebook.on_change = lambda changes: panel.add_action(
                live_button(self.shell, changes, notebook.request.session))
        return run

    def nobody_answers(self, clickable: bool = True) -> str | None:
        """Why nobody can answer an approval in this cell (denied at once, saying so), or None."""
        where = no_clicks_reason() or headless_runner(self.shell)
        if where is None and not clickable:
            where = "autoawait is off, so the cell blocks and its panel cannot be clicked (%autoawait on lets it ask)"
        return where

    def expand_text(self, text: str) -> str:
        """``{expression}`` and ``$name`` replaced by IPython's rules for magic lines; a text with a field that does
        not evaluate (JSON, say) is left as written."""
        assert self.shell is not None, "AgentMagics is used inside an IPython shell"
        # var_expand also reads the locals of the frame `depth` levels up; past the top of the stack there is none,
        # so only the user namespace counts, as for a magic line at the top level of a cell.
        return str(self.shell.var_expand(text, depth=sys.getrecursionlimit()))

    def expand_prompt(self, prompt: str, secrets: SecretSet | None = None) -> str:
        """The prompt expanded (:meth:`expand_text`). A secret the expanded prompt holds is sent as its marker, and
        a line in the cell says so."""
        expanded = self.expand_text(prompt)
        redacted = (secrets or KERNEL.current).redact(expanded, shapes=False)
        if redacted != expanded:
            shown = [name for name in (secrets or KERNEL.current).names if marker(name) in redacted]
            print(f"agentkernel: the prompt holds the secret {', '.join('$' + n for n in shown)}: the model is sent "
                  f"{', '.join(marker(n) for n in shown)} instead, and its code can use the value by name")
        return redacted

    def configured_keys(self, options: AgentOptions, model: Model | None) -> dict[str, str]:
        """The keys of the run's model and of the configured MCP entries, by name (for the kernel's secret set)."""
        from ..models.cassette import model_secrets

        keys = {f"MODEL_KEY{'_' * bool(i)}{i or ''}": key
                for i, key in enumerate(model_secrets(getattr(model, "inner", model)) if model else [])}
        # Only when there is a configuration (.mcp.json is mcp.config's CONFIG_FILE): reading one loads pydantic.
        if options.mcp_config or os.path.isfile(".mcp.json"):
            from ..mcp.config import load_config

            try:
                keys.update(load_config(options.mcp_config or None).secrets())
            except AgentConfigError:  # a broken configuration: --mcp reports it when it is used
                pass
        return keys

    def note(self, text: str) -> None:
        """Print ``agentkernel: text`` once per kernel (a malformed skill is reported once, not at every run)."""
        if ("", text) not in self.noted:
            self.noted.add(("", text))
            print(f"agentkernel: {text}")

    def note_short(self, names: list[str]) -> None:
        """Say (once per name and value) that a ``secret_env`` name is unset or too short to be kept secret."""
        for name in names:
            value = os.environ.get(name)
            if value is not None and len(value) >= MIN_SECRET_CHARS or (name, value) in self.noted:
                continue
            self.noted.add((name, value))
            why = "is not set" if value is None else f"is shorter than {MIN_SECRET_CHARS} characters"
            print(f"agentkernel: secret_env names {name}, which {why}: it is not treated as a secret")

    def resolve_model(self, options: AgentOptions) -> Model:
        if options.replay and options.record:
            raise UsageError("--record and --replay cannot be used together: record a run from a live model, "
                             "then replay that cassette")
        if options.replay:
            from ..models.cassette import ReplayModel

            model: Model = cassette_file("--replay", options.replay, ReplayModel)
        else:
            model = self.named_model(options)
        if options.record:
            from ..models.cassette import RecordingModel

            writable("--record", options.record)
            model = RecordingModel(model, options.record)
        return model

    def named_model(self, options: AgentOptions) -> Model:
        name = options.model
        found = self.user_ns.get(name) if name else None
        if found is not None:
            if not callable(getattr(found, "stream", None)):
                raise AgentConfigError(f"{name!r} in the notebook is a {type(found).__name__}, not a model "
                                       "(it needs a stream(request) method, like agentkernel.ScriptedModel)")
            return found
        from .policy import Policy

        Policy.load().check_model(name or DEFAULT_OPENAI_MODEL)
        try:
            resolved = resolve(name or DEFAULT_OPENAI_MODEL, api=options.api,
                               base_url=self.provider_base_url(name, options))
        except ValueError as e:
            raise AgentConfigError(str(e)) from None
        if options.api_key_env and not os.environ.get(options.api_key_env):
            raise AgentConfigError(f"--api-key-env names {options.api_key_env}, which is not set in this kernel's "
                                   "environment: set it there (the key stays out of the notebook) or leave the "
                                   "option out for a server that needs no key.")
        if problem := resolved.key_problem(options.api_key_env):
            raise AgentConfigError(NO_MODEL if not name else
                                   f"Model {name!r} is not an object in this notebook and {problem}.")
        return resolved.model_object(api_key_env=options.api_key_env or None,
                                     max_output_tokens=options.max_output_tokens or None,
                                     temperature=options.temperature)

    @staticmethod
    def provider_base_url(name: str, options: AgentOptions) -> str | None:
        """``--base-url`` for the model named; a value that only came from ``$OPENAI_BASE_URL`` is for OpenAI (a
        plain name, ``openai:``) and no other provider."""
        provider = split_model(name)[0]
        from_env = options.base_url == os.environ.get("OPENAI_BASE_URL")
        if provider is not None and provider.name not in ("openai", "openai-compatible") and from_env:
            return None
        return options.base_url or None

    def previous_history(self, transcript: str = "") -> list[dict[str, Any]]:
        """The history ``--continue`` goes on from: that of ``_agent``, or of a transcript file, repaired."""
        if transcript:
            return self.transcript_history(transcript)
        previous = self.user_ns.get("_agent")
        if not isinstance(previous, LoopResult):
            raise AgentConfigError("--continue needs a previous run: run a %%agent cell first (its result is _agent)")
        return previous.history

    @staticmethod
    def transcript_history(path: str) -> list[dict[str, Any]]:
        from ..record.transcript import load_transcript

        try:
            history = load_transcript(os.path.expanduser(path))
        except FileNotFoundError:
            raise AgentConfigError(f"--continue: there is no transcript {path!r}") from None
        except (OSError, UnicodeError) as e:
            raise AgentConfigError(f"--continue: cannot read {path!r} ({e})") from None
        if not history:
            raise AgentConfigError(f"--continue: {path!r} holds no history (is it a transcript? its lines are "
                                   '{"event": "item", "item": {...}})')
        return history

    # -- ending a run ----------------------------------------------------------------------------------------

    def interrupt_reason(self) -> str:
        """How a SIGINT is named in the run's ending: the user's Ctrl-C in terminal IPython, else the kernel's
        interrupt (a notebook's ■ button, or a console's Ctrl-C sent to the kernel)."""
        return "interrupted by you (Ctrl-C)" if is_terminal(self.shell) else "interrupted by the kernel interrupt"

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
            run.loop.stop.set(self.interrupt_reason())

        signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def publish(self, run: CellRun, result: LoopResult) -> CellResult:
        result = CellResult(**{f.name: getattr(result, f.name) for f in fields(LoopResult)},
                            executed_code=run.kernel.executed_code)
        self.user_ns["_agent"] = result
        if run.out:
            self.user_ns[run.out] = result
        return result

    def finish(self, run: CellRun) -> None:
        """Store the result, replace the live panel with the run's record, and end the cell as the run's status
        says."""
        from .render import record_bundle

        assert run.loop.result is not None
        result = self.publish(run, run.loop.result)
        display(record_bundle(result, run.panel.timeline), raw=True)
        if run.footer:
            print(f"agentkernel: {run.footer}")
        if run.notebook.changes is not None and run.notebook.changes.cells:  # the extension's Undo button
            display(run.notebook.changes.output(), raw=True)
        self.end_panel(run)
        # ONE next input (a front end shows one): the cells add_cell queued where no extension answers, and the
        # code --cells could not write as cells
        left = run.cells_left if run.cells_left is not None else result.executed_code if run.cells else []
        if text := run.notebook.next_input(left):
            assert self.shell is not None
            self.shell.set_next_input(text, replace=False)
        if run.interrupted:
            raise RunInterrupted("the agent run was interrupted; its history is kept in _agent") from None
        if result.status in STOP_ERRORS:
            raise STOP_ERRORS[result.status](result) from None


    @staticmethod
    def end_panel(run: CellRun) -> None:
        """The panel's display emptied (the record below it replaces it, or the run failed) and its widgets closed:
        a saved notebook holds no view of a dead widget model, and the kernel no widget of a finished run."""
        if run.shown is not None:
            run.shown.update({"text/plain": PANEL_TEXT}, raw=True)
            run.shown = None
        run.panel.close()

def cassette_file(flag: str, path: str, read: Callable[[str], Model]) -> Model:
    """``read(path)``, its failures made one line naming the file (and the line, for a corrupt one)."""
    try:
        return read(os.path.expanduser(path))
    except FileNotFoundError:
        raise AgentConfigError(f"{flag}: there is no cassette {path!r} (record one with --record {path})") from None
    except IsADirectoryError:
        raise AgentConfigError(f"{flag}: {path!r} is a folder, not a cassette file") from None
    except (OSError, UnicodeError) as e:
        raise AgentConfigError(f"{flag}: cannot read {path!r} ({e})") from None
    except ValueError as e:  # names the file and the line
        raise AgentConfigError(f"{flag}: {e}") from None


def transcript_folder(setting: str | None) -> str | bool:
    """What ``AgentLoop(transcript=...)`` takes for the ``transcripts`` setting: True for the default folder, False
    for none (``""``), else the folder, made now (AgentConfigError when it cannot be)."""
    if setting is None or not setting:
        return setting is None
    folder = os.path.abspath(os.path.expanduser(setting))  # where it was made, whatever the kernel does later
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise AgentConfigError(f"transcripts: cannot make the folder {setting!r} ({e.strerror or e}); "
                               "%config AgentMagics.transcripts = '' writes none") from None
    return folder


def writable(flag: str, path: str) -> None:
    """AgentConfigError unless a file can be written at ``path`` (checked before the run, not at its first exchange)."""
    target = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(target)
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder) if os.path.dirname(folder) != folder else ""
    if os.path.isdir(target):
        raise AgentConfigError(f"{flag}: {path!r} is a folder; give a file name such as {path.rstrip('/')}/run.jsonl")
    if not os.path.isdir(folder):
        raise AgentConfigError(f"{flag}: cannot write {path!r}: {folder!r} is a file, not a folder")
    if not os.access(folder, os.W_OK) or os.path.exists(target) and not os.access(target, os.W_OK):
        raise AgentConfigError(f"{flag}: cannot write {path!r} (permission denied)")

