"""``%agent_serve [options]`` / ``%agent_serve stop``: this kernel's tools served over MCP to an outside agent."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.display import display

from ...secrets import KERNEL
from ..approvals import is_terminal
from ..kernel_state import Awaited
from ..options import split_line
from .shared import StateMagics


@magics_class
class ServeMagics(StateMagics):
    """``%agent_serve``, awaited alone in its cell (the server runs on the kernel's event loop)."""

    def awaited_forms(self) -> dict[str, Awaited]:
        return {"agent_serve": self.serve}

    @line_magic
    def agent_serve(self, line: str) -> None:
        """``%agent_serve [options]``: serve this kernel's tools over MCP (Streamable HTTP on 127.0.0.1, a bearer
        token) to an outside agent such as Claude Code, Codex, Gemini CLI or VS Code, until ``%agent_serve stop``.

        The options are ``%%agent``'s (``--tools``, ``--root``, ``--mcp``, ``--allow-writes``, ``--max-tool-calls``,
        ``--max-seconds``, the guards...) and ``--port N`` (else a free port). Every call goes through the same
        approvals, redaction and guards as a ``%%agent`` call; the panel shows each call, asks there, and its Stop
        ends the running call and the session, whose record then replaces the panel. ``_agent_serve`` holds the
        session: ``url``, ``headers`` (what a client sends), ``token_file`` (the token, for the snippets), ``calls``
        and ``transcript``. It must be alone in its cell (it is awaited there, on the kernel's loop).
        """
        raise UsageError(f"%agent_serve {line.strip()} must be alone in its cell, with autoawait on (the default in "
                         "a notebook): the server runs on the kernel's event loop")

    async def serve(self, line: str, cell: str | None = None) -> None:
        """The awaited ``%agent_serve``: start the session (or stop it) and show its panel."""
        state = self.state
        if is_terminal(state.shell):
            raise UsageError("%agent_serve needs a Jupyter kernel: terminal IPython runs its event loop only while a "
                             "cell runs, so a server started there would not answer between cells")
        from ..cell import run_tools
        from ..plan import RunPlan
        from ..serve import SERVE_TEXT, port_option

        port, line = port_option(state.expand_text(line) if state.settings.expand else line)
        words, rest = split_line(line)
        if rest.strip() == "stop" and not words:
            print(await state.serving.stop())
            return
        if rest.strip():
            raise UsageError(f"%agent_serve takes options (those of %%agent, and --port N), or stop; not {rest!r}")
        try:
            options = state.merge(state.parser.parse_args(words))
        except UsageError as e:
            raise UsageError(f"%agent_serve: {e} (%%agent? lists the options)") from None
        plan = RunPlan.of(options)
        plan.policy.check_serve()
        KERNEL.configure(keys=plan.keys(None), env_names=options.secret_env)
        state.note_short(options.secret_env)
        tools = run_tools(state, plan, model_images=True)
        nobody = state.nobody_answers()
        served = await state.serving.start(plan, tools, port=port, nobody=nobody, shell=state.shell)
        state.user_ns["_agent_serve"] = served
        bundle = served.panel.view._repr_mimebundle_()
        bundle["text/plain"] = SERVE_TEXT  # fixed (the snippets hold no token: they read it from a file)
        served.shown = display(bundle, raw=True, display_id=True)
        if nobody:
            print(f"agentkernel: side-effecting calls are denied at once ({nobody}); --allow-writes runs them")
